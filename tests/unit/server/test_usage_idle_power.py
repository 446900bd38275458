"""Idle power from the pool's own cards (issue 52): a model's idle figure is learned from its
cards' power readings while they hold nothing (a low percentile, once enough are in), stored,
shown with its source at ``/v1/fleet/power``, and used where the catalog's stand-in was: the
energy of a held card whose agent reads no power. A real app and a hand-moved clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from server_kit import A100, Server, devices, heartbeat, node, report, submit, tenant
from sqlalchemy import select

from xpupool.catalog.operator_file import load_operator_catalog
from xpupool.server.storage.usage import usage_idle_power
from xpupool.server.up import UpConfig, open_plane
from xpupool.server.usage.idle_power import DEFAULT_MIN_SAMPLES

H100 = "NVIDIA H100 80GB HBM3"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster-mixed.yaml"


def _metrics(server: Server, readings: dict[str, dict[str, Any]], node_name: str = "n1") -> None:
    body = {
        "node": node_name,
        "replicas": [],
        "metrics": [{"uuid": u, **m} for u, m in readings.items()],
    }
    r = server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def _idle_power(server: Server) -> list[dict[str, Any]]:
    r = server.client.get("/v1/fleet/power", headers=server.admin)
    assert r.status_code == 200, r.text
    return list(r.json()["idle_power"])


def _energy_j(server: Server) -> float:
    params = {"by": "tenant", "step": "month", "from": "0"}
    rows = server.client.get("/v1/usage", params=params, headers=server.admin).json()["rows"]
    return sum(r["energy_j"] for r in rows if r["tenant"] == "a")


def test_idle_watts_are_learned_from_idle_cards_and_used_for_energy(server: Server) -> None:
    node(server, "n1", count=4)
    a = tenant(server, "a")
    ja = submit(server, a, "A100:1")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(ja, 0, "running")])
    held = next(d["uuid"] for d in devices(server, "n1") if d["jobs"] == [ja])
    idle = [f"n1-gpu{i}" for i in range(4) if f"n1-gpu{i}" != held]
    assert _idle_power(server) == [
        {"model": A100, "idle_watts": 0.0, "source": "none", "samples": 0}  # no catalog figure
    ]
    flushes = -(-DEFAULT_MIN_SAMPLES // len(idle))  # enough readings of the idle cards
    for _ in range(flushes):
        # the held card reads 10 W: counted in, the learned figure would be 10 W
        _metrics(server, {held: {"power_w": 10.0}} | {u: {"power_w": 50.0} for u in idle})
        server.clock.advance(60)
        server.plane.meter.flush(server.plane)
    learned = _idle_power(server)
    assert learned == [
        {"model": A100, "idle_watts": 50.0, "source": "measured", "samples": flushes * len(idle)}
    ]
    with server.plane.db.connect() as conn:  # stored: a restart starts from it
        rows = conn.execute(select(usage_idle_power.c.model, usage_idle_power.c.watts)).all()
    assert [tuple(r) for r in rows] == [("A100-SXM4-80GB", 50.0)]
    # the held card now reports use but no power: its energy is the model's, idle at 50 W
    _metrics(server, {held: {"utilization_pct": 0.0}} | {u: {"power_w": 50.0} for u in idle})
    before = _energy_j(server)
    server.clock.advance(600)
    server.plane.meter.flush(server.plane)
    assert _energy_j(server) - before == pytest.approx(50.0 * 600)


def test_the_energy_policy_places_by_the_idle_watts_learned(server: Server) -> None:
    """The plane hands the meter's power model to its engine's energy scorer (issue 55). Two
    nodes alike but for their eight cards' model: with the catalog's figures (no idle figure,
    0 W) a card of the 400 W A100 adds less than one of the 700 W H100, so ``policy=energy``
    takes the A100 node; once its A100s are measured idling at 60 W, waking that node adds
    340 + 8 x 60 = 820 W, more than the H100's 700 W."""
    node(server, "a", count=8)
    node(server, "h", count=8, model=H100)
    t = tenant(server, "t")

    def placed_on(job_id: int) -> str:
        return next(d["node"] for d in devices(server) if job_id in d["jobs"])

    first = submit(server, t, "any policy=energy")["id"]
    server.schedule()
    assert placed_on(first) == "a"
    heartbeat(server, "a")
    heartbeat(server, "a", [report(first, 0, "running")])
    heartbeat(server, "a", [report(first, 0, "succeeded", 0)])
    a100s = [f"a-gpu{i}" for i in range(8)]
    flushes = -(-DEFAULT_MIN_SAMPLES // len(a100s))
    for _ in range(flushes):
        _metrics(server, {u: {"power_w": 60.0} for u in a100s}, "a")
        server.clock.advance(60)
        server.plane.meter.flush(server.plane)
    learned = {"model": A100, "idle_watts": 60.0, "source": "measured", "samples": flushes * 8}
    assert learned in _idle_power(server)
    second = submit(server, t, "any policy=energy")["id"]
    server.schedule()
    assert placed_on(second) == "h"


def test_the_operators_figures_reach_the_energy_scorer_at_start(tmp_path: Path) -> None:
    """``xpupool up --catalog FILE``: the operator's idle figure is the energy scorer's from the
    start, before any usage interval has run."""
    path = tmp_path / "site.yaml"
    path.write_text("accelerators:\n  - {name: A100-SXM4-80GB, idle_watts: 55}\n")
    cfg = UpConfig(data=tmp_path / "data", cluster=EXAMPLE, agent=False)
    plane = open_plane(replace(cfg, catalog=load_operator_catalog(path)))
    try:
        power = plane.engine.power
        assert power is not None and power.idle_source(A100) == "operator"
        assert power.figures(A100).idle_watts == 55.0
    finally:
        plane.db.dispose()
