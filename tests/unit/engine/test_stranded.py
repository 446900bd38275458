"""Stranded capacity on tiny fleets where the answer can be read off by hand."""

from __future__ import annotations

from tests.factories import T4, gpu_node

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import ShapeTable, TargetWorkload, stranded_capacity
from xpupool.model import DeviceRequest, Request

HALF_A100 = Request("h", 4000, 0, DeviceRequest(count=1, core_permille=500, models=("A100",)))
THREE_QUARTERS = Request("q", 0, 0, DeviceRequest(count=1, core_permille=750, uuids=("a-gpu0",)))


def test_idle_capacity_no_shape_can_use_is_stranded_and_the_rest_is_not() -> None:
    """Workload: half an A100 and 4 CPUs. Node ``a``: one card three-quarters taken (its quarter
    is too small for a half), one idle (usable). Node ``t``: T4 cards, which the shape may not
    use. Node ``c``: idle A100s but 2 CPUs, too few for the shape. Node ``x``: a cordoned idle
    card, out of service, not counted."""
    fleet = [
        gpu_node("a", count=2, group_size=0),
        gpu_node("t", model=T4, memory_mib=15360, count=1, group_size=0),
        gpu_node("c", count=2, group_size=0, cpu_milli=2000),
        gpu_node("x", count=1, group_size=0),
    ]
    state = ClusterState(fleet)
    engine = Engine(state, "binpack")
    assert engine.place(THREE_QUARTERS).allocations[0].node == "a"
    state.set_device_cordoned("x-gpu0", True)
    workload = TargetWorkload((HALF_A100,), (1.0,))
    got = stranded_capacity(state, ShapeTable(state, engine.pipeline, workload))
    assert got.core_milli.tolist() == [250, 1000, 2000, 0]
    assert got.memory_mib.tolist() == [81920 - 61440, 15360, 2 * 81920, 0]
    assert (got.total_core_milli, got.total_memory_mib) == (3250, 20480 + 15360 + 163840)
    assert got.devices.tolist() == [1, 1, 2, 0]  # a's idle card is wanted; x's is out of service


def test_a_full_card_holds_no_stranded_capacity() -> None:
    state = ClusterState([gpu_node("a", count=2, group_size=0)])
    engine = Engine(state, "binpack")
    assert engine.place(Request("w", 0, 0, DeviceRequest(count=1))).ok  # a whole card
    table = ShapeTable(state, engine.pipeline, TargetWorkload((HALF_A100,), (1.0,)))
    got = stranded_capacity(state, table)
    assert (got.devices.tolist(), got.total_core_milli) == ([0], 0)


def test_a_card_at_its_task_limit_strands_what_it_has_left() -> None:
    state = ClusterState([gpu_node("a", count=1, group_size=0, max_tasks=1)])
    engine = Engine(state, "binpack")
    quarter = Request("q", 0, 0, DeviceRequest(count=1, core_permille=250))
    table = ShapeTable(state, engine.pipeline, TargetWorkload((quarter,), (1.0,)))
    assert stranded_capacity(state, table).total_core_milli == 0  # idle and usable
    assert engine.place(quarter).ok
    table = ShapeTable(state, engine.pipeline, TargetWorkload((quarter,), (1.0,)))
    assert stranded_capacity(state, table).total_core_milli == 750  # room, but no slot


def test_the_engine_reports_it_for_the_workload_it_keeps() -> None:
    """Given a workload, the engine reports for it; with none and a policy that keeps none
    (binpack), there is nothing to report; xpupool reports for the workload it learned."""
    fleet = [gpu_node("a", count=2, group_size=0), gpu_node("t", model=T4, count=1, group_size=0)]
    workload = TargetWorkload((HALF_A100,), (1.0,))
    given = Engine(ClusterState(fleet), "binpack", workload=workload)
    report = given.stranded()
    assert report is not None and report.core_milli.tolist() == [0, 1000]
    assert Engine(ClusterState(fleet), "binpack").stranded() is None
    learned = Engine(ClusterState(fleet), "xpupool")
    assert learned.stranded() is None  # nothing learned before the first request
    assert learned.place(HALF_A100).ok
    report = learned.stranded()  # the learned shape: half an A100 (a's half card takes another)
    assert report is not None and report.core_milli.tolist() == [0, 1000]
