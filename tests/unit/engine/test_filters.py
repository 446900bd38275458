"""Each filter on hand-made clusters, checked through the engine's explanation and fit mask."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xpupool.engine import Reason
from xpupool.engine.verdict import Verdicts
from xpupool.model import Node, Request, Topology, parse_software_need

from factories import A10, A100, ASCEND_910B3, T4, cpu_node, devices, engine_for, gpu_node


def reasons_of(engine, req):  # type: ignore[no-untyped-def]
    failure = engine.explain(req)
    assert failure is not None
    return {(r.reason, r.detail): r.count for r in failure.reasons}


def test_node_schedulable_cordoned_node_is_skipped() -> None:
    engine = engine_for(gpu_node("a"))
    engine.state.set_node_schedulable("a", False)
    assert reasons_of(engine, devices(1)) == {(Reason.NODE_UNSCHEDULABLE, ""): 1}


def test_node_cpu_and_memory() -> None:
    engine = engine_for(gpu_node("a", cpu_milli=2000), gpu_node("b", memory_node_mib=512))
    req = Request("r", cpu_milli=4000, memory_mib=1024)
    assert reasons_of(engine, req) == {
        (Reason.INSUFFICIENT_CPU, ""): 1,
        (Reason.INSUFFICIENT_MEMORY, ""): 1,
    }


def test_too_few_devices_and_cpu_only_nodes() -> None:
    engine = engine_for(gpu_node("a", count=2), cpu_node("c"))
    assert reasons_of(engine, devices(4)) == {(Reason.TOO_FEW_DEVICES, ""): 2}


def test_device_health_excludes_unhealthy_cards() -> None:
    engine = engine_for(gpu_node("a", count=1, healthy=False))
    assert reasons_of(engine, devices(1)) == {(Reason.DEVICE_UNHEALTHY, ""): 1}


def test_vendor_filter_resolves_aliases() -> None:
    engine = engine_for(
        gpu_node("a"), gpu_node("n", vendor="huawei", model=ASCEND_910B3, memory_mib=65536)
    )
    placement = engine.place(devices(1, vendors=("huawei",)))
    assert placement.allocations[0].node == "n"
    assert reasons_of(engine, devices(8, vendors=("nvidia",), models=("910B",))) == {
        (Reason.VENDOR_NOT_ALLOWED, ""): 1,
        (Reason.MODEL_NOT_ALLOWED, ""): 1,
    }


@pytest.mark.parametrize(
    ("token", "model", "fits"),
    [
        ("A100", A100, True),
        ("a100", A100, True),
        ("T4", A10, False),
        ("A10", T4, False),
        ("T4", T4, True),
    ],
)
def test_model_filter_matches_names_not_substrings(token: str, model: str, fits: bool) -> None:
    engine = engine_for(gpu_node("a", model=model))
    assert (engine.explain(devices(1, models=(token,))) is None) is fits


def test_model_exclude_wins() -> None:
    engine = engine_for(gpu_node("a", model=T4, memory_mib=15360), gpu_node("b"))
    placement = engine.place(devices(1, exclude_models=("T4",)))
    assert placement.allocations[0].node == "b"
    assert reasons_of(engine, devices(1, models=("A100",), exclude_models=("A100",))) == {
        (Reason.MODEL_NOT_ALLOWED, ""): 2
    }


def test_uuid_include_and_exclude_exclude_wins() -> None:
    engine = engine_for(gpu_node("a"), gpu_node("b"))
    placement = engine.place(devices(1, uuids=("b-gpu3",)))
    assert placement.allocations[0].devices[0].uuid == "b-gpu3"
    req = devices(1, uuids=("a-gpu1",), exclude_uuids=("a-gpu1",))
    assert reasons_of(engine, req) == {(Reason.UUID_NOT_ALLOWED, ""): 2}


def test_card_memory_bounds_use_nominal_size() -> None:
    engine = engine_for(gpu_node("big"), gpu_node("small", model=T4, memory_mib=15360))
    placement = engine.place(devices(1, min_card_mib=40 * 1024))
    assert placement.allocations[0].node == "big"
    assert reasons_of(engine, devices(1, min_card_mib=100 * 1024)) == {(Reason.CARD_MEMORY, ""): 2}
    placement = engine.place(devices(1, max_card_mib=16 * 1024))
    assert placement.allocations[0].node == "small"


def test_software_blames_the_most_hopeful_device() -> None:
    engine = engine_for(
        gpu_node("new", driver="550.54.15"),
        gpu_node("old", driver="535.104.05"),
        gpu_node("npu", vendor="huawei", model=ASCEND_910B3, memory_mib=65536, driver="24.1.rc2"),
        gpu_node("nodrv", driver=None),
    )
    need = parse_software_need("cuda>=12.4")
    engine.state.set_node_schedulable("new", False)
    assert reasons_of(engine, devices(1, software=(need,))) == {
        (Reason.NODE_UNSCHEDULABLE, ""): 1,
        (Reason.DRIVER_TOO_OLD, "535.104.05 too old for cuda>=12.4: needs >= 550.54.14"): 1,
        (Reason.SOFTWARE_UNSUPPORTED, "cuda>=12.4"): 1,
        (Reason.DRIVER_UNKNOWN, "cuda>=12.4"): 1,
    }
    engine.state.set_node_schedulable("new", True)
    assert engine.place(devices(1, software=(need,))).allocations[0].node == "new"


@pytest.mark.parametrize(
    ("driver", "fits"),
    [("550.54.13", False), ("550.54.14", True), ("525.85.12", False)],
)
def test_driver_too_old_names_the_driver_and_the_minimum(driver: str, fits: bool) -> None:
    """Exactly at the table's minimum runs; one below is refused, and the reason names the
    node's driver and the driver the need asks for (per software profile, not per node)."""
    engine = engine_for(gpu_node("a", driver=driver), gpu_node("b", driver=driver))
    req = devices(1, software=(parse_software_need("cuda>=12.4"),))
    assert engine.place(req).ok is fits
    if not fits:
        detail = f"{driver} too old for cuda>=12.4: needs >= 550.54.14"
        assert reasons_of(engine, req) == {(Reason.DRIVER_TOO_OLD, detail): 2}
        assert f"2 driver {detail}" in engine.explain(req).message


def test_driver_reasons_differ_per_driver() -> None:
    engine = engine_for(gpu_node("a", driver="525.85.12"), gpu_node("b", driver="535.104.05"))
    req = devices(
        1, software=(parse_software_need("torch==2.5.1"), parse_software_need("cuda>=12.4"))
    )
    assert reasons_of(engine, req) == {
        (Reason.DRIVER_TOO_OLD, "525.85.12 too old for cuda>=12.4: needs >= 550.54.14"): 1,
        (Reason.DRIVER_TOO_OLD, "535.104.05 too old for cuda>=12.4: needs >= 550.54.14"): 1,
    }


def test_device_memory_in_mib_and_percent_rounds_down() -> None:
    engine = engine_for(gpu_node("a", count=1, memory_mib=81921))
    first = engine.place(devices(1, memory_permille=500))
    second = engine.place(devices(1, memory_permille=500))
    assert first.ok and second.ok
    assert first.allocations[0].devices[0].memory_mib == 40960
    assert reasons_of(engine, devices(1, memory_mib=2)) == {
        (Reason.INSUFFICIENT_DEVICE_MEMORY, ""): 1
    }


def test_device_cores_and_whole_card_need_all_compute() -> None:
    engine = engine_for(gpu_node("a", count=1))
    assert engine.place(devices(1, memory_mib=1024, core_permille=600)).ok
    assert reasons_of(engine, devices(1, memory_mib=1024, core_permille=500)) == {
        (Reason.INSUFFICIENT_DEVICE_CORES, ""): 1
    }
    # A memory-only share takes no compute, so it still fits; a whole card does not.
    assert engine.place(devices(1, memory_mib=1024)).ok
    assert reasons_of(engine, devices(1)) == {(Reason.INSUFFICIENT_DEVICE_MEMORY, ""): 1}


def test_same_link_group_needs_one_domain() -> None:
    engine = engine_for(gpu_node("a", count=8, group_size=4))
    engine.place(devices(1, uuids=("a-gpu0",)))
    engine.place(devices(1, uuids=("a-gpu4",)))
    req = devices(4, topology=Topology.SAME_LINK_GROUP)
    assert reasons_of(engine, req) == {(Reason.TOPOLOGY, ""): 1}
    assert engine.place(devices(4)).ok  # without the constraint, 4 of 6 free cards will do


def test_unschedulable_message_reads_like_kube() -> None:
    engine = engine_for(gpu_node("a"), gpu_node("b", model=T4, memory_mib=15360), cpu_node("c"))
    failure = engine.explain(devices(1, models=("H100",)))
    assert failure is not None
    assert failure.message == "0/3 nodes fit: 3 model not allowed"  # a CPU node has no H100
    assert not failure.preemption_may_help


def test_each_node_is_blamed_on_the_first_check_it_fails_kind_count_health() -> None:
    """A node without a single card of the kind asked reads "model not allowed" whatever its
    card count or health; "too few devices" is for nodes with the kind but not enough of it,
    "unhealthy" for nodes with enough of it but not usable (issue 42: 13 nodes without an H100
    were once split over "too few devices" and "unhealthy or cordoned")."""
    h100 = "NVIDIA H100 80GB HBM3"
    engine = engine_for(
        gpu_node("a1", count=1),
        gpu_node("a1-sick", count=1, healthy=False),
        gpu_node("a8"),
        gpu_node("t4", model=T4, memory_mib=15360, count=1),
        cpu_node("cpu"),
        gpu_node("h1", model=h100, count=1),
        gpu_node("h2-sick", model=h100, count=2, healthy=False),
    )
    assert reasons_of(engine, devices(2, models=("H100",))) == {
        (Reason.MODEL_NOT_ALLOWED, ""): 5,
        (Reason.TOO_FEW_DEVICES, ""): 1,
        (Reason.DEVICE_UNHEALTHY, ""): 1,
    }


def _numa_node(name: str, numa_of: tuple[int | None, ...], **kw: object) -> Node:
    """``gpu_node`` with one link group over all cards and card ``j`` on NUMA ``numa_of[j]``."""
    node = gpu_node(name, count=len(numa_of), group_size=len(numa_of), **kw)  # type: ignore[arg-type]
    cards = tuple(replace(d, numa_node=n) for d, n in zip(node.devices, numa_of, strict=True))
    return replace(node, devices=cards)


def test_same_numa_keeps_a_replicas_cards_on_one_numa_node() -> None:
    """HAMi's numa-bind (pkg/device/nvidia/device.go ``Fit``: NumaNotFit): 8 cards, 4 a NUMA
    node; after one share on card 0, four whole cards fit only on NUMA 1."""
    engine = engine_for(_numa_node("a", (0, 0, 0, 0, 1, 1, 1, 1)))
    assert engine.place(devices(1, uuids=("a-gpu0",), memory_mib=1024)).ok
    placed = engine.place(devices(4, topology=Topology.SAME_NUMA))
    assert placed.ok
    assert sorted(s.uuid for s in placed.allocations[0].devices) == [
        f"a-gpu{j}" for j in range(4, 8)
    ]
    third = engine.place(devices(3, topology=Topology.SAME_NUMA))  # cards 1-3 of NUMA 0
    assert sorted(s.uuid for s in third.allocations[0].devices) == ["a-gpu1", "a-gpu2", "a-gpu3"]


def test_same_numa_needs_the_numa_node_reported_and_wide_enough() -> None:
    engine = engine_for(_numa_node("a", (0,) * 4 + (1,) * 4), _numa_node("u", (None,) * 8))
    assert reasons_of(engine, devices(5, topology=Topology.SAME_NUMA)) == {(Reason.NUMA, ""): 2}
    assert engine.place(devices(5)).ok  # without the constraint, across NUMA nodes
    miss = Verdicts(engine.state).never_fits(devices(5, topology=Topology.SAME_NUMA))
    assert miss is not None and miss.field == "devices.topology"
    assert "the largest NUMA node has 4" in miss.reason, miss
    assert engine.place(devices(1, topology=Topology.SAME_NUMA)).ok  # one card: any


def test_device_mode_takes_cards_of_an_asked_mode_or_of_none_stated() -> None:
    """HAMi's ``checkType``: the card's registered mode must be one the pod asks for
    (``nvidia.com/vgpu-mode``); a card with no mode stated takes any."""
    node = gpu_node("a", count=4)
    modes = ("hami-core", "mps", "mig", None)
    cards = tuple(replace(d, share_mode=m) for d, m in zip(node.devices, modes, strict=True))
    engine = engine_for(replace(node, devices=cards))
    for asked, usable in (
        (("mps",), {"a-gpu1", "a-gpu3"}),
        (("hami-core", "mps"), {"a-gpu0", "a-gpu1", "a-gpu3"}),
        ((), {"a-gpu0", "a-gpu1", "a-gpu2", "a-gpu3"}),
    ):
        ctx = engine.feasible(devices(1, share_modes=asked))
        assert ctx.dev_fit is not None
        got = {engine.state.slot_uuid[int(s)] for s in ctx.dev_fit.reshape(-1).nonzero()[0]}
        assert got == usable, asked
    other = gpu_node("b", count=2)
    modes_b = ("hami-core", "mig")
    no_mps = tuple(replace(d, share_mode=m) for d, m in zip(other.devices, modes_b, strict=True))
    engine = engine_for(replace(other, devices=no_mps))
    assert reasons_of(engine, devices(1, share_modes=("mps",))) == {(Reason.SHARE_MODE, ""): 1}


def test_a_nodes_cordoned_cards_take_no_new_work() -> None:
    """``Node.cordoned_devices`` (HAMi's ``hami.io/device-cordon``): those cards of the node are
    out of service; a UUID of another node's card cordons nothing; a cordon may end, so it is
    no reason to call a request impossible."""
    engine = engine_for(
        replace(gpu_node("a", count=2), cordoned_devices={"a-gpu0", "a-gpu1"}),
        replace(gpu_node("b", count=1), cordoned_devices={"a-gpu0", "nowhere"}),
    )
    assert reasons_of(engine, devices(2)) == {
        (Reason.DEVICE_UNHEALTHY, ""): 1,
        (Reason.TOO_FEW_DEVICES, ""): 1,
    }
    assert engine.place(devices(1)).allocations[0].node == "b"
    assert Verdicts(engine.state).never_fits(devices(2)) is None


@pytest.mark.parametrize("profile", ["xpupool", "binpack", "spread"])
def test_every_profile_keeps_a_topology_constraint_when_picking_cards(profile: str) -> None:
    """The profiles whose scorers pick a multi-card replica's cards themselves (FGD's "first k
    fitting cards") keep to its NUMA node or link group too, as the device policies do."""
    node = _numa_node("a", (0, 0, 0, 0, 1, 1, 1, 1))
    links = tuple(replace(d, link_group=f"l{j % 2}") for j, d in enumerate(node.devices))
    engine = engine_for(replace(node, devices=links), profile=profile)
    assert engine.place(devices(1, uuids=("a-gpu0",), memory_mib=1024)).ok
    for topology, group_of in (
        (Topology.SAME_NUMA, lambda j: j // 4),
        (Topology.SAME_LINK_GROUP, lambda j: j % 2),
    ):
        placed = engine.place(devices(2, topology=topology))
        cards = [int(s.uuid.removeprefix("a-gpu")) for s in placed.allocations[0].devices]
        assert len({group_of(j) for j in cards}) == 1, (topology, cards)
