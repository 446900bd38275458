"""Over-commit factors per card: what may be committed is the physical amount times the factor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.factories import gpu_node

from xpupool.engine import ClusterState, Engine
from xpupool.engine.reasons import Reason
from xpupool.model import Device, DeviceRequest, Node, Request
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError
from xpupool.probes.cluster_file import parse_cluster

HALF = Request("half", 0, 0, DeviceRequest(count=1, memory_permille=500, core_permille=100))
WHOLE_CARD = Request("whole", 0, 0, DeviceRequest(count=1))


def _node(memory: float = 1.0, cores: float = 1.0, count: int = 1) -> Node:
    devices = tuple(
        Device(f"d{j}", "nvidia", "NVIDIA A100-SXM4-80GB", 81920, index=j,
               memory_overcommit=memory, cores_overcommit=cores)
        for j in range(count)
    )  # fmt: skip
    return Node("n", 64_000, 512 * 1024, devices)


def _placed(engine: Engine, req: Request) -> Allocation:
    placement = engine.place(req)
    assert placement.ok, placement.failures
    (alloc,) = placement.allocations
    return alloc


def test_memory_factor_one_and_a_half_takes_three_halves_sized_on_the_physical_card() -> None:
    engine = Engine(ClusterState([_node(memory=1.5)]), "binpack")
    halves = [_placed(engine, HALF) for _ in range(3)]
    assert {a.devices[0].memory_mib for a in halves} == {40960}  # half of the physical 80 GiB
    assert engine.state.dev_mem_commit[0, 0] == 122880
    assert engine.state.dev_mem_free[0, 0] == 0
    refused = engine.place(HALF)
    assert [r.reason for r in refused.failures[0].reasons] == [Reason.INSUFFICIENT_DEVICE_MEMORY]


def test_cores_factor_two_takes_compute_up_to_two_cards_and_never_more() -> None:
    share = Request("s", 0, 0, DeviceRequest(count=1, memory_mib=1000, core_permille=700))
    engine = Engine(ClusterState([_node(cores=2.0)]), "binpack")
    for _ in range(2):
        _placed(engine, share)
    assert engine.state.dev_core_free[0, 0] == 600
    refused = engine.place(share)
    assert [r.reason for r in refused.failures[0].reasons] == [Reason.INSUFFICIENT_DEVICE_CORES]


def test_a_whole_card_needs_an_untouched_card_and_stays_alone_under_over_commit() -> None:
    engine = Engine(ClusterState([_node(memory=2.0, cores=2.0)]), "binpack")
    small = _placed(engine, HALF)
    assert not engine.place(WHOLE_CARD).ok  # room for another card's worth, but not untouched
    engine.release(small.id)
    whole = _placed(engine, WHOLE_CARD)
    assert whole.devices[0].memory_mib == 2 * 81920  # it holds all the card may commit
    assert not engine.place(HALF).ok
    engine.release(whole.id)
    _placed(engine, HALF)


def test_committable_capacity_is_rounded_down_and_exact_at_one() -> None:
    state = ClusterState([_node(memory=1.3, cores=1.25)])
    assert state.dev_mem_commit[0, 0] == math.floor(81920 * 1.3)
    assert state.dev_core_commit[0, 0] == 1250
    assert state.dev_mem_total[0, 0] == 81920  # physical, as the card reports it
    plain, one = ClusterState([gpu_node("n", count=2)]), ClusterState([_node(count=2)])
    assert np.array_equal(one.dev_mem_commit, one.dev_mem_total)
    assert np.array_equal(plain.dev_core_commit, np.where(plain.dev_present, 1000, 0))


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, math.inf, math.nan, "1.5", True, None])
def test_a_device_refuses_a_factor_below_one_or_not_finite(bad: object) -> None:
    for field in ("memory_overcommit", "cores_overcommit"):
        with pytest.raises(RequestError) as exc:
            Device("u", "nvidia", "T4", 15360, **{field: bad})  # type: ignore[arg-type]
        assert exc.value.field == field


def _cluster(node: dict[str, object] | None = None, **top: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": "n",
        "cpu": 8,
        "memory": "64Gi",
        "devices": [
            {"vendor": "nvidia", "model": "Tesla T4", "count": 1, "memory": "15Gi"},
            {"vendor": "nvidia", "model": "NVIDIA L20", "count": 1, "memory": "45Gi"},
        ],
        **(node or {}),
    }
    return {"nodes": [entry], **top}


def test_the_cluster_file_sets_factors_per_model_and_per_node_each_factor_node_first() -> None:
    (node,) = parse_cluster(
        _cluster(
            {"overcommit": {"memory": 1.5}},
            device_models={"Tesla T4": {"overcommit": {"memory": 2.0, "cores": 3}}},
        )
    )
    t4, l20 = node.devices
    assert (t4.memory_overcommit, t4.cores_overcommit) == (1.5, 3.0)
    assert (l20.memory_overcommit, l20.cores_overcommit) == (1.5, 1.0)


@pytest.mark.parametrize(
    ("cluster", "field"),
    [
        (_cluster({"overcommit": {"memory": 0.9}}), "nodes[0].overcommit.memory"),
        (_cluster({"overcommit": {"cores": ".inf"}}), "nodes[0].overcommit.cores"),
        (_cluster({"overcommit": {"cores": float("nan")}}), "nodes[0].overcommit.cores"),
        (_cluster({"overcommit": {"compute": 2}}), "nodes[0].overcommit.compute"),
        (_cluster({"overcommit": 2}), "nodes[0].overcommit"),
        (
            _cluster(device_models={"Tesla T4": {"overcommit": {"memory": 0}}}),
            "device_models[Tesla T4].overcommit.memory",
        ),
    ],
)
def test_the_cluster_file_names_a_bad_factor(cluster: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as exc:
        parse_cluster(cluster)
    assert exc.value.field == field
