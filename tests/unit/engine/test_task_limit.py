"""A per-card task limit (HAMi's ``deviceSplitCount``): the most tasks that may share one card."""

from __future__ import annotations

import numpy as np
import pytest
from tests.factories import gpu_node

from xpupool.engine import ClusterState, Engine
from xpupool.engine.capacity import UNLIMITED_TASKS
from xpupool.engine.reasons import Reason
from xpupool.model import Device, DeviceRequest, Request
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError
from xpupool.probes.cluster_file import parse_cluster

QUARTER = Request("q", 0, 0, DeviceRequest(count=1, core_permille=250))


def _arrays(state: ClusterState) -> dict[str, bytes]:
    """Every array of the state but ``node_version``, which counts changes and never goes back."""
    names = [n for n, v in vars(state).items() if isinstance(v, np.ndarray) and n != "node_version"]
    return {n: getattr(state, n).tobytes() for n in sorted(names)}


def _placed(engine: Engine, req: Request) -> Allocation:
    placement = engine.place(req)
    assert placement.ok, placement.failures
    (alloc,) = placement.allocations
    return alloc


def test_a_card_with_limit_two_takes_two_quarters_then_refuses_a_third() -> None:
    engine = Engine(ClusterState([gpu_node("a", count=1, max_tasks=2)]), "binpack")
    first = _placed(engine, QUARTER)
    _placed(engine, QUARTER)
    assert engine.state.dev_task_free[0, 0] == 0
    assert engine.state.dev_core_free[0, 0] == 500  # room for compute, none for a third task
    third = engine.place(QUARTER)
    assert not third.ok
    (why,) = third.failures
    assert [r.reason for r in why.reasons] == [Reason.DEVICE_TASK_LIMIT]
    assert "task limit" in why.message
    assert why.preemption_may_help
    explained = engine.explain(QUARTER)
    assert explained is not None and explained.reasons[0].reason is Reason.DEVICE_TASK_LIMIT
    engine.release(first.id)
    assert engine.state.dev_task_free[0, 0] == 1
    _placed(engine, QUARTER)


def test_slots_are_counted_per_card_and_unlimited_cards_are_not_checked() -> None:
    state = ClusterState([gpu_node("a", count=2, max_tasks=3), gpu_node("b", count=1)])
    assert state.tasks_limited
    assert state.dev_task_total[0, :2].tolist() == [3, 3]
    assert state.dev_task_total[1, 0] == UNLIMITED_TASKS
    assert state.dev_task_total[1, 1] == 0  # padding: no card, no slot
    assert not ClusterState([gpu_node("b", count=2)]).tasks_limited


def test_apply_then_revert_restores_the_state_bit_for_bit() -> None:
    engine = Engine(ClusterState([gpu_node("a", count=2, max_tasks=2)]), "binpack")
    _placed(engine, QUARTER)
    before = _arrays(engine.state)
    placed = [_placed(engine, r) for r in (QUARTER, Request("w", 0, 0, DeviceRequest(count=1)))]
    assert _arrays(engine.state) != before
    for alloc in placed:
        engine.release(alloc.id)
    assert _arrays(engine.state) == before


def test_a_state_rebuilt_for_a_new_node_keeps_the_slots_taken() -> None:
    state = ClusterState([gpu_node("a", count=1, max_tasks=2)])
    _placed(Engine(state, "binpack"), QUARTER)
    state.add_node(gpu_node("b", count=9, max_tasks=4))
    assert state.dev_task_free[0, 0] == 1
    assert state.dev_task_free[1, :9].tolist() == [4] * 9


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_device_refuses_a_limit_that_is_not_a_whole_number_of_at_least_one(bad: object) -> None:
    with pytest.raises(RequestError) as exc:
        Device("u", "nvidia", "T4", 15360, max_tasks=bad)  # type: ignore[arg-type]
    assert exc.value.field == "max_tasks"


def _cluster(**extra: object) -> dict[str, object]:
    node: dict[str, object] = {
        "name": "n",
        "count": 2,
        "cpu": 8,
        "memory": "64Gi",
        "devices": [
            {"vendor": "nvidia", "model": "Tesla T4", "count": 2, "memory": "15Gi"},
            {"vendor": "nvidia", "model": "NVIDIA L20", "count": 1, "memory": "45Gi"},
        ],
    }
    node.update(extra.pop("node", {}))  # type: ignore[call-overload]
    return {"nodes": [node], **extra}


def test_the_cluster_file_sets_limits_per_model_and_per_node_the_node_first() -> None:
    nodes = parse_cluster(_cluster(device_models={"Tesla T4": {"device_split_count": 4}}))
    assert [d.max_tasks for d in nodes[0].devices] == [4, 4, None]
    nodes = parse_cluster(
        _cluster(
            device_models={"Tesla T4": {"device_split_count": 4}},
            node={"device_split_count": 2},
        )
    )
    assert [d.max_tasks for d in nodes[1].devices] == [2, 2, 2]
    state = ClusterState(nodes)
    assert state.dev_task_free[0, :3].tolist() == [2, 2, 2]


@pytest.mark.parametrize(
    ("cluster", "field"),
    [
        (_cluster(node={"device_split_count": 0}), "nodes[0].device_split_count"),
        (_cluster(node={"device_split_count": "4"}), "nodes[0].device_split_count"),
        (
            _cluster(device_models={"Tesla T4": {"device_split_count": -2}}),
            "device_models[Tesla T4].device_split_count",
        ),
        (_cluster(device_models={"Tesla T4": {"split": 2}}), "device_models[Tesla T4].split"),
        (_cluster(device_models={"V100": {"device_split_count": 2}}), "device_models[V100]"),
        (_cluster(device_models=[1]), "device_models"),
        (_cluster(models={}), "models"),
    ],
)
def test_the_cluster_file_names_a_bad_capacity_setting(
    cluster: dict[str, object], field: str
) -> None:
    with pytest.raises(RequestError) as exc:
        parse_cluster(cluster)
    assert exc.value.field == field
