"""Rehearsal: the stranded share worked out by hand, the verdict where the answer is known, and
the default policy's use of it (only with a workload, on a fleet big enough, once per fleet)."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine, rehearsal
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.profile import BUILTIN_PROFILES
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.scorers.xpupool import Xpupool, XpupoolFine
from xpupool.model import DeviceRequest, Node, Request

from factories import cpu_node, gpu_node


def share(permille: int, cpu: int = 1000) -> Request:
    return Request("s", cpu, 0, DeviceRequest(count=1, core_permille=permille))


def whole(cpu: int = 1000) -> Request:
    return Request("w", cpu, 0, DeviceRequest(count=1))


def small_nodes(count: int) -> list[Node]:
    return [gpu_node(f"n{i}", count=2, group_size=0, cpu_milli=64_000) for i in range(count)]


def test_stranded_by_hand() -> None:
    # 0.6 shares on 4 cards: the 7th draw would pass capacity (7 * 600 > 4000), so 6 arrive; one
    # fits per card (0.4 is left on each, too little for another): 4 * 400 idle of 4000 = 40 %.
    only_shares = TargetWorkload((share(600),), (1.0,))
    profile = BUILTIN_PROFILES["fgd"]
    assert rehearsal.stranded(small_nodes(2), only_shares, profile, 0) == pytest.approx(40.0)
    # Whole cards fill the 4 cards exactly.
    only_whole = TargetWorkload((whole(),), (1.0,))
    assert rehearsal.stranded(small_nodes(2), only_whole, profile, 0) == 0.0


def test_stranded_is_zero_where_nothing_could_arrive() -> None:
    profile = BUILTIN_PROFILES["fgd"]
    assert (
        rehearsal.stranded([cpu_node("c")], TargetWorkload((share(500),), (1.0,)), profile, 0) == 0
    )
    cpu_only = TargetWorkload((Request("c", 1000),), (1.0,))
    assert rehearsal.stranded(small_nodes(2), cpu_only, profile, 0) == 0.0


def test_packing_beats_spreading_shares_that_whole_cards_need() -> None:
    """Half-card shares and whole cards: spreading shares over cards breaks the whole cards that
    half the demand needs; FGD pairs the halves. The rehearsal must say so, both ways round."""
    workload = TargetWorkload((share(500), whole()), (0.5, 0.5))
    nodes = small_nodes(rehearsal.MIN_NODES)
    spread, fgd = BUILTIN_PROFILES["spread"], BUILTIN_PROFILES["fgd"]
    assert rehearsal.second_is_better(nodes, workload, spread, fgd)
    assert not rehearsal.second_is_better(nodes, workload, fgd, spread)


def test_small_fleets_and_device_less_workloads_are_not_rehearsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(*args: object) -> float:
        raise AssertionError("rehearsed")

    monkeypatch.setattr(rehearsal, "stranded", fail)
    spread, fgd = BUILTIN_PROFILES["spread"], BUILTIN_PROFILES["fgd"]
    workload = TargetWorkload((share(500),), (1.0,))
    assert not rehearsal.second_is_better(
        small_nodes(rehearsal.MIN_NODES - 1), workload, spread, fgd
    )
    cpu_only = TargetWorkload((Request("c", 1000),), (1.0,))
    assert not rehearsal.second_is_better(small_nodes(rehearsal.MIN_NODES), cpu_only, spread, fgd)


def test_the_default_policy_rehearses_once_per_fleet_and_workload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[str] = []
    real = rehearsal.stranded

    def counted(nodes: list[Node], workload: TargetWorkload, profile: object, seed: int) -> float:
        runs.append(getattr(profile, "name", "?"))
        return real(nodes, workload, profile, seed)  # type: ignore[arg-type]

    monkeypatch.setattr(rehearsal, "stranded", counted)
    monkeypatch.setattr(rehearsal, "_verdicts", {})
    # Shares of 0.3 and 0.7 on a big enough fleet; no workload means no rehearsal.
    workload = TargetWorkload((share(300), share(700), whole()), (0.4, 0.4, 0.2))
    nodes = small_nodes(rehearsal.MIN_NODES)
    Engine(ClusterState(nodes, seed=1), "xpupool", seed=1).place(share(300))
    assert runs == []
    engine = Engine(ClusterState(nodes, seed=1), "xpupool", seed=1, workload=workload)
    assert engine.place(share(300)).ok
    assert sorted(set(runs)) == ["xpupool-fine", "xpupool-half"]
    assert len(runs) == 2 * rehearsal.SEEDS
    again = Engine(ClusterState(nodes, seed=2), seed=2, workload=workload)
    assert again.place(share(700)).ok
    assert len(runs) == 2 * rehearsal.SEEDS  # the verdict is kept
    (note,) = again.notes()
    assert note.startswith("xpupool: ") and f"rehearsal, {rehearsal.SEEDS} paired runs" in note


def test_the_policy_says_what_it_chose_and_why() -> None:
    workload = TargetWorkload((share(300), whole()), (0.5, 0.5))
    small = Engine(ClusterState(small_nodes(4)), workload=workload)
    online = Engine(ClusterState(small_nodes(4)))
    pinned = Engine(ClusterState(small_nodes(4)), "xpupool-fine", workload=workload)
    for engine in (small, online, pinned):
        assert engine.notes() == []  # scorers are built at the first placement
        assert engine.place(share(300)).ok
    assert small.notes() == [
        "xpupool: half resolution for one-card replicas (not rehearsed: under "
        f"{rehearsal.MIN_NODES} nodes or no device shapes)"
    ]
    assert online.notes() == [
        "xpupool: half resolution for one-card replicas (no target workload to rehearse: "
        "learned online)"
    ]
    assert pinned.notes() == ["xpupool-fine: FGD's resolution for one-card replicas (pinned)"]
    assert Engine(ClusterState(small_nodes(4)), "fgd", workload=workload).notes() == []


def test_fine_resolution_scores_one_card_replicas_as_fgd_does() -> None:
    """With nothing contended and a device request, xpupool-fine's score is FGD's own."""
    rng = np.random.default_rng(5)
    nodes = small_nodes(12)
    workload = TargetWorkload((share(300), share(500), whole()), (0.3, 0.3, 0.4))
    engine = Engine(ClusterState(nodes, seed=5), "fgd", seed=5, workload=workload)
    for step in range(30):
        engine.place(share(int(rng.choice([200, 300, 500, 700]))))
        if step % 5 == 4:
            req = share(int(rng.choice([300, 500])))
            env = ScorerEnv(5, engine.pipeline, workload)
            fine, fgd = XpupoolFine(env), Fgd(env)
            assert isinstance(fine, Xpupool)
            ctx = engine.pipeline.context(req)
            engine.pipeline.filter(ctx)
            fit = ctx.node_fit
            assert np.array_equal(fine.score(ctx)[fit], fgd.score(ctx)[fit])
            assert fine.pick(ctx, int(np.flatnonzero(fit)[0])) == fgd.pick(
                ctx, int(np.flatnonzero(fit)[0])
            )
