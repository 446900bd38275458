"""A job's image adds the catalog's needs at submission (in-process server, real SQLite): the
merged request is what is stored and placed, the request's own need for a runtime wins, an
image no rule knows adds nothing, and each of these is said in the job's events."""

from __future__ import annotations

from typing import Any

from server_kit import Server, job, queue, tenant

from xpupool.catalog.image_needs import merge_image_needs
from xpupool.catalog.images import default_image_catalog, load_image_rules
from xpupool.model.request import parse_software_need
from xpupool.model.request_model import request_from_dict

PYTORCH = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
MINDIE = "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:1.0.RC2-800I-A2-aarch64"


def _node(server: Server, name: str, driver: str, **device: Any) -> None:
    body = {
        "name": name,
        "runtime": "docker",
        "cpu_milli": 64_000,
        "memory_mib": 1 << 18,
        "devices": [
            {
                "uuid": f"{name}-gpu{i}",
                "vendor": device.get("vendor", "nvidia"),
                "model": device.get("model", "NVIDIA A100-SXM4-80GB"),
                "memory_mib": 81920,
                "index": i,
                "driver_version": driver,
            }
            for i in range(2)
        ],
    }
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def _submit(server: Server, token: str, **body: Any) -> Any:
    return server.client.post("/v1/jobs", json=body, headers=server.as_(token))


def _reasons(server: Server, job_id: int) -> list[str]:
    return [e["reason"] for e in job(server, job_id)["events"]]


def test_image_needs_place_on_the_new_driver_and_are_stored(server: Server) -> None:
    _node(server, "old", "525.85.12")
    _node(server, "new", "550.54.14")
    a = tenant(server, "a")
    r = _submit(server, a, image=PYTORCH, spec="A100:1")
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    added = [e for e in _reasons(server, job_id) if "added" in e]
    assert added == [
        f"image {PYTORCH} (catalog rule images.yaml: pytorch, "
        "https://hub.docker.com/r/pytorch/pytorch/tags): software needs cuda>=12.4, "
        "torch==2.4.0 added"
    ]
    stored = request_from_dict(job(server, job_id)["request"])
    assert [str(n) for n in stored.devices.software] == ["cuda>=12.4", "torch==2.4.0"]
    server.schedule()
    assert job(server, job_id)["assignments"][0]["node"] == "new"


def test_pending_reason_names_the_driver_and_its_minimum(server: Server) -> None:
    _node(server, "old", "525.85.12")
    _node(server, "new", "550.54.14")
    a = tenant(server, "a")
    r = server.client.post("/v1/nodes/new/cordon", headers=server.admin)
    assert r.status_code == 200, r.text
    job_id = _submit(server, a, image=PYTORCH, spec="A100:1").json()["id"]
    server.schedule()
    pending = job(server, job_id)
    assert pending["state"] == "pending"
    assert "1 driver 525.85.12 too old for cuda>=12.4: needs >= 550.54.14" in pending["reason"]


def test_a_pool_that_cannot_run_the_image_refuses_it_naming_image(server: Server) -> None:
    _node(server, "old", "525.85.12")
    a = tenant(server, "a")
    r = _submit(server, a, image=PYTORCH, spec="A100:1")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == "image" and body["value"] == PYTORCH
    assert "driver 525.85.12 too old for cuda>=12.4: needs >= 550.54.14" in body["reason"]
    assert "software needs cuda>=12.4, torch==2.4.0 added" in body["reason"]
    # a queue that keeps what nothing fits keeps it, pending with the same reason
    queue(server, "grow", "a", [], allow_unfittable=True)
    r = _submit(server, a, image=PYTORCH, spec="A100:1", queue="grow")
    assert r.status_code == 201, r.text
    assert "driver 525.85.12 too old for cuda>=12.4" in job(server, r.json()["id"])["reason"]


def test_the_requests_own_need_wins_and_the_events_say_so(server: Server) -> None:
    _node(server, "old", "535.104.05")
    a = tenant(server, "a")
    r = _submit(server, a, image=PYTORCH, spec="A100:1 cuda>=12.1")
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    reasons = _reasons(server, job_id)
    assert (
        f"software need cuda>=12.1 given by the request wins over cuda>=12.4 implied by image "
        f"{PYTORCH}"
    ) in reasons
    stored = request_from_dict(job(server, job_id)["request"])
    assert [str(n) for n in stored.devices.software] == ["cuda>=12.1", "torch==2.4.0"]
    server.schedule()
    assert job(server, job_id)["assignments"][0]["node"] == "old"


def test_an_unknown_image_adds_nothing_and_says_so(server: Server) -> None:
    _node(server, "old", "525.85.12")
    a = tenant(server, "a")
    r = _submit(server, a, image="registry.example/train:1", spec="A100:1")
    job_id = r.json()["id"]
    assert (
        "no catalog rule knows image registry.example/train:1: no software needs added"
        in _reasons(server, job_id)
    )
    assert request_from_dict(job(server, job_id)["request"]).devices.software == ()
    server.schedule()
    assert job(server, job_id)["assignments"][0]["node"] == "old"


def test_a_product_line_becomes_the_models_the_engine_places_on(server: Server) -> None:
    _node(server, "a100", "550.54.15")
    _node(server, "npu", "24.1.rc2", vendor="huawei", model="910B3")
    _node(server, "duo", "24.1.rc2", vendor="huawei", model="310P3")
    a = tenant(server, "a")
    job_id = _submit(server, a, image=MINDIE, spec="1").json()["id"]
    stored = request_from_dict(job(server, job_id)["request"])
    assert stored.devices.models == ("910B",) and stored.devices.vendors == ("huawei",)
    assert [str(n) for n in stored.devices.software] == ["cann>=8.0.RC2"]
    server.schedule()
    assert job(server, job_id)["assignments"][0]["node"] == "npu"


def test_merge_rules_without_a_server() -> None:
    catalog = default_image_catalog()
    cpu_only = request_from_dict("cpu=1")
    merged = merge_image_needs(cpu_only, PYTORCH, catalog)
    assert merged.request == cpu_only and not merged.changed
    assert "the job asks for no devices: nothing added" in merged.events[-1]
    chosen = request_from_dict("L20:1")
    merged = merge_image_needs(chosen, MINDIE, catalog)
    assert merged.request.devices.models == ("L20",) and not merged.product_added
    assert "win over image" in merged.events[0]
    assert merge_image_needs(chosen, None, catalog).request is chosen


def test_operator_rules_reach_submission(server: Server, tmp_path: Any) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(
        "images:\n"
        "  - name: site\n"
        "    repository: registry.example/train\n"
        "    tag: 'cu(?P<cuda>\\d+\\.\\d+)'\n"
        "    needs: ['cuda>={cuda}']\n"
        "    source: https://wiki.example/images\n"
    )
    server.plane.image_catalog = default_image_catalog().with_rules_first(load_image_rules(path))
    _node(server, "old", "525.85.12")
    _node(server, "new", "560.35.05")
    a = tenant(server, "a")
    job_id = _submit(server, a, image="registry.example/train:cu12.6", spec="A100:1").json()["id"]
    assert request_from_dict(job(server, job_id)["request"]).devices.software == (
        parse_software_need("cuda>=12.6"),
    )
    server.schedule()
    assert job(server, job_id)["assignments"][0]["node"] == "new"
