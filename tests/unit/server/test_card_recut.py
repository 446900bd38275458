"""Re-cutting a partitioned card of an agent node through the API (issue 53): the layout is
checked against the geometry, refused while a job holds (or recently held) an instance it
destroys or where the node's pool forbids it, and otherwise stored, its doomed instances
cordoned, handed to the agent in the heartbeat reply, and recorded applied once the agent
registers the new layout, or dropped when the agent reports its tool failed. Each refusal
changes nothing (the store's rows, the cordons)."""

from __future__ import annotations

from typing import Any

from server_kit import A100, Server, devices, row_counts, submit, tenant

from xpupool.server.plane.card_recut import DEFAULT_MIN_IDLE_S

CARD = "GPU-card0"
PATH = f"/v1/nodes/n1/cards/{CARD}/layout"
BEFORE = (("3g.40gb", 0, 40960), ("2g.20gb", 4, 20480), ("1g.10gb", 6, 10240))
AFTER = (("3g.40gb", 0, 40960), ("3g.40gb", 4, 40960))


def _register(
    server: Server, layout: tuple[tuple[str, int, int], ...] = BEFORE, **labels: str
) -> None:
    found: list[dict[str, Any]] = [
        {
            "uuid": f"MIG-n1-0-{start}",
            "vendor": "nvidia",
            "model": A100,
            "memory_mib": mib,
            "index": 0,
            "max_tasks": 1,
            "partition": profile,
            "partition_of": CARD,
            "partition_start": start,
        }
        for profile, start, mib in layout
    ]
    body = {
        "name": "n1",
        "cpu_milli": 64_000,
        "memory_mib": 1 << 20,
        "devices": found,
        "labels": labels,
    }
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def _heartbeat(server: Server, **extra: Any) -> dict[str, Any]:
    r = server.client.post(
        "/v1/agent/heartbeat", json={"node": "n1", **extra}, headers=server.admin
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def _cordoned(server: Server) -> set[str]:
    return {d["uuid"] for d in devices(server, "n1") if d["cordoned"]}


def _put(server: Server, layout: list[str], **extra: Any) -> Any:
    return server.client.put(PATH, json={"layout": layout, **extra}, headers=server.admin)


def _audit(server: Server) -> list[str]:
    r = server.client.get("/v1/audit", headers=server.admin)
    assert r.status_code == 200, r.text
    return [e["action"] for e in r.json()]


def test_a_recut_reaches_the_agent_and_is_recorded_applied(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    r = _put(server, ["3g.40gb@0", "3g.40gb@4"], why="the queue wants 3g")
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["current"] == ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]
    assert shown["wanted"] == ["3g.40gb@0", "3g.40gb@4"]
    assert [e["event"] for e in shown["events"]] == ["asked"]
    # what it destroys takes no work meanwhile; what it keeps does
    assert _cordoned(server) == {"MIG-n1-0-4", "MIG-n1-0-6"}
    reply = _heartbeat(server)
    assert reply["recut"] == [{"card": CARD, "layout": ["3g.40gb@0", "3g.40gb@4"]}]
    # the agent cut the card and registers what its probes read now
    _register(server, AFTER)
    assert _heartbeat(server)["recut"] == []
    r = server.client.get(PATH, headers=server.admin)
    assert r.status_code == 200, r.text
    assert r.json()["wanted"] is None
    assert r.json()["current"] == ["3g.40gb@0", "3g.40gb@4"]
    assert [e["event"] for e in r.json()["events"]] == ["applied", "asked"]
    assert _cordoned(server) == set()  # the new 3g.40gb@4 (the old UUID of 2g@4) takes work
    assert {"recut", "recut_applied"} <= set(_audit(server))
    token = tenant(server, "a")
    job = submit(server, token, "A100 mig=3g.40gb")
    submit(server, token, "A100 mig=3g.40gb")
    assert server.schedule() == 2
    assert job["id"] > 0


def test_a_recut_destroying_a_busy_instance_is_refused_and_changes_nothing(
    server: Server,
) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    submit(server, token, "A100 mig=2g.20gb")
    assert server.schedule() == 1  # on MIG-n1-0-4, the only 2g.20gb
    before = row_counts(server)
    r = _put(server, ["3g.40gb@0", "3g.40gb@4"])
    assert r.status_code == 409, r.text
    assert "MIG-n1-0-4" in r.json()["reason"]
    assert row_counts(server) == before
    assert _cordoned(server) == set()
    assert _heartbeat(server)["recut"] == []
    # a partial re-cut that keeps the busy instance where it is goes ahead
    r = _put(server, ["1g.10gb@0", "1g.10gb@1", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"])
    assert r.status_code == 200, r.text
    assert _cordoned(server) == {"MIG-n1-0-0"}


def test_an_instance_busy_too_recently_is_not_destroyed(server: Server) -> None:
    _register(server)
    before = row_counts(server)
    r = _put(server, ["3g.40gb@0", "3g.40gb@4"])  # the plane has not seen it idle 5 min yet
    assert r.status_code == 409, r.text
    assert row_counts(server) == before
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    job = submit(server, token, "A100 mig=2g.20gb")
    assert server.schedule() == 1
    r = server.client.post(f"/v1/jobs/{job['id']}/cancel", headers=server.as_(token))
    assert r.status_code == 200, r.text
    _heartbeat(server, replicas=[{"job_id": job["id"], "replica": 0, "state": "stopped"}])
    server.clock.advance(60)  # released a minute ago: its instance is not idle long enough
    assert _put(server, ["3g.40gb@0", "3g.40gb@4"]).status_code == 409
    server.clock.advance(DEFAULT_MIN_IDLE_S)
    assert _put(server, ["3g.40gb@0", "3g.40gb@4"]).status_code == 200


def test_a_layout_the_geometry_refuses_is_422_naming_it(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    before = row_counts(server)
    for layout, said in (
        (["3g.40gb@0", "3g.40gb@2"], "3g.40gb cannot start at slice 2"),
        (["5g.40gb@0"], "no profile '5g.40gb'"),
        (["3g.40gb@x"], "PROFILE@START"),
        (["3g.40gb@\u00b2"], "PROFILE@START"),  # a digit to str.isdigit, not to int()
    ):
        r = _put(server, layout)
        assert r.status_code == 422, r.text
        assert r.json()["field"].startswith("layout"), r.text
        assert said in r.json()["reason"], r.text
    assert row_counts(server) == before
    assert _put(server, ["3g.40gb@0"]).status_code == 200  # a valid one is taken
    assert (
        server.client.put(
            "/v1/nodes/n1/cards/GPU-none/layout",
            json={"layout": ["3g.40gb@0"]},
            headers=server.admin,
        ).status_code
        == 404
    )


def test_a_pool_that_forbids_recuts_refuses_them(server: Server) -> None:
    _register(server, **{"xpupool/recut": "false"})
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    before = row_counts(server)
    assert _put(server, ["3g.40gb@0", "3g.40gb@4"]).status_code == 409
    assert row_counts(server) == before


def test_a_failed_tool_drops_the_wanted_layout_and_lifts_the_cordons(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    assert _put(server, ["3g.40gb@0", "3g.40gb@4"]).status_code == 200
    assert _cordoned(server) == {"MIG-n1-0-4", "MIG-n1-0-6"}
    stranger = {"card": "GPU-not-asked", "reason": "made up"}  # ignored: nothing asked of it
    assert _heartbeat(server, recut_failed=[stranger])["recut"] != []
    failure = {"card": CARD, "reason": "nvidia-smi mig -i 0 -cgi 3g.40gb:4 -C: In use"}
    assert _heartbeat(server, recut_failed=[failure])["recut"] == []
    r = server.client.get(PATH, headers=server.admin)
    assert r.json()["wanted"] is None
    assert r.json()["events"][0]["event"] == "failed"
    assert "In use" in r.json()["events"][0]["detail"]
    assert _cordoned(server) == set()


def test_only_the_admin_recuts(server: Server) -> None:
    _register(server)
    token = tenant(server, "a")
    r = server.client.put(PATH, json={"layout": ["3g.40gb@0"]}, headers=server.as_(token))
    assert r.status_code == 403, r.text


def test_a_deleted_node_takes_its_wanted_layouts_with_it(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    assert _put(server, ["3g.40gb@0", "3g.40gb@4"]).status_code == 200
    r = server.client.delete("/v1/nodes/n1", headers=server.admin)
    assert r.status_code == 200, r.text
    _register(server)  # a new machine under the old name: nobody asked it for a re-cut
    assert _heartbeat(server)["recut"] == []
    assert server.client.get(PATH, headers=server.admin).json()["wanted"] is None
