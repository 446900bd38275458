"""Hardware partitions through the API: an agent registers a card's MIG instances, a request for
a profile is placed on one and its assignment says so, ``/v1/devices`` carries each instance's
place on its card, and a profile the named model lacks is refused with the model's profiles."""

from __future__ import annotations

from typing import Any

from server_kit import Server, submit, tenant

LAYOUT = (("3g.40gb", 0, 40960), ("2g.20gb", 4, 20480), ("1g.10gb", 6, 10240))


def _register(server: Server) -> None:
    devices: list[dict[str, Any]] = [
        {
            "uuid": f"MIG-n1-0-{start}",
            "vendor": "nvidia",
            "model": "NVIDIA A100-SXM4-80GB",
            "memory_mib": mib,
            "index": 0,
            "max_tasks": 1,
            "partition": profile,
            "partition_of": "GPU-card0",
            "partition_start": start,
        }
        for profile, start, mib in LAYOUT
    ]
    body = {"name": "n1", "cpu_milli": 64_000, "memory_mib": 1 << 20, "devices": devices}
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def test_a_profile_is_placed_on_an_instance_and_shown_in_the_layout(server: Server) -> None:
    _register(server)
    token = tenant(server, "a")
    job = submit(server, token, "A100 mig=2g.20gb")
    # a partitioned card takes no whole-card request: with no other card, refused outright
    r = server.client.post(
        "/v1/jobs", json={"spec": "A100", "command": ["true"]}, headers=server.as_(token)
    )
    assert r.status_code == 422 and "hardware partitions" in r.json()["reason"], r.text
    server.schedule()
    r = server.client.get(f"/v1/jobs/{job['id']}", headers=server.as_(token))
    assert r.status_code == 200, r.text
    granted = r.json()["assignments"][0]["devices"]
    assert [(d["uuid"], d["partition"]) for d in granted] == [("MIG-n1-0-4", "2g.20gb")]
    r = server.client.get("/v1/devices", headers=server.admin)
    layout = {
        d["uuid"]: (d["partition"], d["partition_of"], d["partition_start"], d["jobs"])
        for d in r.json()
    }
    assert layout == {
        "MIG-n1-0-0": ("3g.40gb", "GPU-card0", 0, []),
        "MIG-n1-0-4": ("2g.20gb", "GPU-card0", 4, [job["id"]]),
        "MIG-n1-0-6": ("1g.10gb", "GPU-card0", 6, []),
    }


def test_a_profile_the_named_model_lacks_is_refused_with_its_profiles(server: Server) -> None:
    _register(server)
    token = tenant(server, "a")
    r = server.client.post(
        "/v1/jobs",
        json={"spec": "A100-SXM4-40GB mig=3g.40gb", "command": ["true"]},
        headers=server.as_(token),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "spec.devices.partition"
    assert "A100-SXM4-40GB: 1g.5gb" in r.json()["reason"]
