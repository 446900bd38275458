"""Cards that could sleep and nodes that could be powered down (issue 55), through the API and
``/metrics``: reported from what the pool holds, a node only after its idle period."""

from __future__ import annotations

import pytest
from server_kit import Server, heartbeat, node, report, submit, tenant

from xpupool.server.power_saving import DEFAULT_POWER_DOWN_AFTER_S


def power(server: Server) -> dict[str, object]:
    r = server.client.get("/v1/fleet/power", headers=server.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.slow
def test_idle_cards_could_sleep_and_an_idle_node_could_be_powered_down(server: Server) -> None:
    node(server, "busy", count=2)
    node(server, "idle", count=2)
    a = tenant(server, "a")
    made = submit(server, a, "A100:1")["id"]
    server.schedule()
    heartbeat(server, "busy", [report(made, 0, "running")])
    first = power(server)
    sleepy = {c["uuid"] for c in first["could_sleep"]}  # type: ignore[attr-defined]
    assert len(sleepy) == 3 and {"idle-gpu0", "idle-gpu1"} <= sleepy
    assert first["could_power_down"] == []  # idle, but not for long yet
    server.clock.advance(DEFAULT_POWER_DOWN_AFTER_S)
    later = power(server)
    assert [n["node"] for n in later["could_power_down"]] == ["idle"]  # type: ignore[attr-defined]
    text = server.client.get("/metrics", headers=server.admin).text
    assert "xpupool_cards_could_sleep 3.0" in text
    assert "xpupool_nodes_could_power_down 1.0" in text
    # work arrives on the idle node: it is no longer listed, and its idle period starts again
    submit(server, a, "A100:2")
    server.schedule()
    assert power(server)["could_power_down"] == []
