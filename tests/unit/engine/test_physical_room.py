"""QoS and over-commit in the engine's fit (issue 54 part 5): a guaranteed share stays within the
physical card, best-effort and burstable shares may use the over-committed part, a whole card is
unaffected, preemption frees the physical part by taking best-effort first and never takes a
guaranteed job, and the mark survives re-addressing."""

from __future__ import annotations

from dataclasses import replace

from xpupool.engine import ClusterState, Engine
from xpupool.engine.cycle import plan_preemption
from xpupool.engine.cycle.eviction import may_evict
from xpupool.engine.reasons import PREEMPTION_MAY_HELP, Reason
from xpupool.model import Device, DeviceRequest, Node, Request
from xpupool.model.qos import QoS

A100 = "NVIDIA A100-SXM4-80GB"


def _node(name: str = "n", memory: float = 2.0, cores: float = 1.0, count: int = 1) -> Node:
    devices = tuple(
        Device(f"{name}-d{j}", "nvidia", A100, 81920, index=j,
               memory_overcommit=memory, cores_overcommit=cores)
        for j in range(count)
    )  # fmt: skip
    return Node(name, 64_000, 512 * 1024, devices)


def _share(qos: QoS, permille: int = 500, core: int | None = None, priority: int = 0) -> Request:
    devices = DeviceRequest(count=1, memory_permille=permille, core_permille=core)
    return Request(f"{qos.value}-{permille}", 0, 0, devices, priority=priority, qos=qos)


def _engine(*nodes: Node) -> Engine:
    return Engine(ClusterState(list(nodes)), "binpack")


def test_a_guaranteed_share_takes_only_the_physical_part_of_an_over_committed_card() -> None:
    engine = _engine(_node(memory=2.0))
    for _ in range(2):  # two halves: exactly the physical card
        assert engine.place(_share(QoS.GUARANTEED)).ok
    refused = engine.place(_share(QoS.GUARANTEED))
    assert not refused.ok
    assert [r.reason for r in refused.failures[0].reasons] == [Reason.PHYSICAL_CAPACITY]
    for qos in (QoS.BEST_EFFORT, QoS.BURSTABLE):  # the over-committed part is theirs
        assert engine.place(_share(qos)).ok
    assert engine.state.dev_mem_free[0, 0] == 0


def test_a_guaranteed_share_goes_to_the_card_with_physical_room() -> None:
    engine = _engine(_node("a", memory=2.0), _node("b", memory=2.0))
    for _ in range(3):  # binpack: 1.5 cards committed on the one card it fills
        assert engine.place(_share(QoS.BEST_EFFORT)).ok
    (busy,) = {a.node for a in engine.state.live.values()}
    placed = engine.place(_share(QoS.GUARANTEED))
    assert placed.ok
    (alloc,) = placed.allocations
    assert alloc.node != busy
    node = engine.state.node_index[alloc.node]
    committed = engine.state.dev_mem_commit[node, 0] - engine.state.dev_mem_free[node, 0]
    assert committed <= engine.state.dev_mem_total[node, 0]


def test_over_committed_compute_is_kept_from_guaranteed_shares_too() -> None:
    engine = _engine(_node(memory=1.0, cores=2.0))
    assert engine.place(_share(QoS.BURSTABLE, permille=100, core=800)).ok
    assert not engine.place(_share(QoS.GUARANTEED, permille=100, core=300)).ok
    assert engine.place(_share(QoS.GUARANTEED, permille=100, core=200)).ok
    assert engine.place(_share(QoS.BEST_EFFORT, permille=100, core=900)).ok


def test_without_over_commit_a_guaranteed_share_fits_as_any_other() -> None:
    engine = _engine(_node(memory=1.0))
    assert engine.place(_share(QoS.GUARANTEED)).ok
    assert engine.place(_share(QoS.GUARANTEED)).ok
    refused = engine.place(_share(QoS.GUARANTEED))
    assert [r.reason for r in refused.failures[0].reasons] == [Reason.INSUFFICIENT_DEVICE_MEMORY]


def test_a_whole_guaranteed_card_is_held_alone_and_not_refused_for_over_commit() -> None:
    engine = _engine(_node(memory=2.0))
    whole = Request("w", 0, 0, DeviceRequest(count=1), qos=QoS.GUARANTEED)
    assert engine.place(whole).ok


def test_preemption_frees_the_physical_part_taking_best_effort_first() -> None:
    engine = _engine(_node(memory=2.0))
    burst = engine.place(_share(QoS.BURSTABLE, priority=1)).allocations[0]
    best = engine.place(_share(QoS.BEST_EFFORT)).allocations[0]  # the lowest priority there is
    refused = engine.place(_share(QoS.GUARANTEED, priority=10))
    assert refused.failures[0].reasons[0].reason in PREEMPTION_MAY_HELP
    plan = plan_preemption(engine.pipeline, _share(QoS.GUARANTEED, priority=10))
    assert plan is not None
    assert [v.id for v in plan.victims] == [best.id]
    assert burst.id in engine.state.live  # the plan changes nothing


def test_a_guaranteed_job_is_never_a_victim_of_priority() -> None:
    engine = _engine(_node(memory=1.0))
    held = engine.place(_share(QoS.GUARANTEED, permille=1000)).allocations[0]
    assert held.guaranteed
    assert plan_preemption(engine.pipeline, _share(QoS.BURSTABLE, priority=100)) is None
    assert engine.place(_share(QoS.BURSTABLE)).allocations == ()


def test_the_eviction_rule_never_takes_a_guaranteed_holder() -> None:
    assert may_evict(0, 10) and not may_evict(0, 10, guaranteed=True)


def test_the_guaranteed_mark_survives_readdressing() -> None:
    engine = _engine(_node(memory=2.0))
    alloc = engine.place(_share(QoS.GUARANTEED)).allocations[0]
    assert engine.state.readdress(replace(alloc, node_index=-1)).guaranteed
