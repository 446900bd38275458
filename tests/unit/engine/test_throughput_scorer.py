"""The throughput scorer: fastest card on an idle fleet; on a busy one, the card where the job's
advantage exceeds the typical job's; silent for jobs without speeds."""

from __future__ import annotations

from xpupool.engine import ClusterState, Engine
from xpupool.engine.scorers.throughput import Throughput
from xpupool.model import Device, Node, Request
from xpupool.model.request_model import request_from_dict


def _fleet(per_model: int = 2, cards: int = 4) -> list[Node]:
    return [
        Node(
            f"{m}-{i}",
            64_000,
            256 * 1024,
            tuple(Device(f"{m}-{i}-g{j}", "nvidia", m, 16_384, index=j) for j in range(cards)),
        )
        for m in ("K80", "P100", "V100")
        for i in range(per_model)
    ]


def _model_of(engine: Engine, req: Request) -> str:
    placement = engine.place(req)
    assert placement.ok
    return placement.allocations[0].node.split("-")[0]


RESNET = "any speed=V100:10,P100:5,K80:1"
RECOMMENDATION = "any speed=V100:1,P100:1,K80:0.9"


def test_idle_fleet_gives_each_job_its_fastest_card() -> None:
    engine = Engine(ClusterState(_fleet(), seed=0), "throughput", seed=0)
    assert _model_of(engine, request_from_dict(RESNET)) == "V100"
    assert _model_of(engine, request_from_dict("any speed=V100:1,P100:1.2,K80:1.5")) == "K80"


def test_busy_fleet_leaves_fast_cards_to_jobs_that_gain_more() -> None:
    engine = Engine(ClusterState(_fleet(), seed=0), "throughput", seed=0)
    for _ in range(10):  # the workload: mostly jobs that gain 10x on V100s
        assert _model_of(engine, request_from_dict(RESNET)) in ("V100", "P100")
    # 10 of 24 cards busy; the recommendation job is near its best on a K80 and gains little
    # from the V100 the others need.
    assert _model_of(engine, request_from_dict(RECOMMENDATION)) == "K80"
    # on an idle fleet the same job takes a V100 (its fastest card)
    idle = Engine(ClusterState(_fleet(), seed=0), "throughput", seed=0)
    assert _model_of(idle, request_from_dict(RECOMMENDATION)) in ("V100", "P100")


def test_jobs_without_speeds_are_placed_as_by_binpack() -> None:
    fleet = _fleet()
    ours = Engine(ClusterState(fleet, seed=0), "throughput", seed=0)
    binpack = Engine(ClusterState(fleet, seed=0), "binpack", seed=0)
    for spec in ("any", "any:2", "V100", "any cores=50%"):
        a, b = ours.place(request_from_dict(spec)), binpack.place(request_from_dict(spec))
        assert [x.node for x in a.allocations] == [x.node for x in b.allocations]


def _worth(engine: Engine) -> dict[str, float]:
    scorer = next(s for s, _ in engine._weighted(engine.profile) if isinstance(s, Throughput))
    ref = scorer._worth(engine.state)
    return {printed: float(v) for (_, printed), v in zip(engine.state.models, ref, strict=True)}


def test_a_refused_job_teaches_ref_nothing() -> None:
    """ref(m) counted every request it was shown: a job that waits, tried at every pass, weighed
    once per try. Only placed jobs count now."""
    engine = Engine(ClusterState(_fleet(), seed=0), "throughput", seed=0)
    _model_of(engine, request_from_dict(RESNET))
    before = _worth(engine)
    huge = request_from_dict("any:8 speed=V100:1,P100:1,K80:1")  # 8 cards: no node has them
    for _ in range(20):
        assert not engine.place(huge).ok
    assert _worth(engine) == before


def test_ref_forgets_old_jobs() -> None:
    """After many recommendation jobs (K80 worth 0.9), a run of ResNet jobs (K80 worth 0.1)
    moves ref(K80) most of the way to 0.1 rather than to the all-time mean."""
    engine = Engine(ClusterState(_fleet(per_model=200, cards=1), seed=0), "throughput", seed=0)
    for _ in range(200):
        _model_of(engine, request_from_dict(RECOMMENDATION))
    for _ in range(400):
        _model_of(engine, request_from_dict(RESNET))
    all_time_mean = (200 * 0.9 + 400 * 0.1) / 600
    assert _worth(engine)["K80"] < 0.1 + (all_time_mean - 0.1) / 2
