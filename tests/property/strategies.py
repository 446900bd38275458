"""Hypothesis strategies: small random heterogeneous clusters and random requests."""

from __future__ import annotations

import os

from hypothesis import strategies as st

from xpupool.model import Device, DeviceRequest, Node, Request, Topology, parse_software_need
from xpupool.model.taint import parse_taint, parse_toleration

KINDS = (
    ("nvidia", "NVIDIA A100-SXM4-80GB", 81920, ("550.54.15", "535.104.05", None)),
    ("nvidia", "Tesla T4", 15360, ("470.82.01", "525.60.13")),
    ("huawei", "910B3", 65536, ("24.1.rc2", "23.0.0")),
    ("amd", "AMD Instinct MI300X", 196592, ("6.7.0",)),
    ("cambricon", "MLU370-X8", 49152, ("5.10.22",)),
)
# `make test-fast` sets XPUPOOL_TEST_FAST=1: each property then draws a tenth of its examples, so the
# fast loop still runs every property in seconds; make test and CI draw them all
FAST = os.environ.get("XPUPOOL_TEST_FAST") == "1"


def examples(n: int) -> int:
    """The ``max_examples`` of a property: ``n``, or a tenth of it (at least 10) in the fast loop."""
    return max(10, n // 10) if FAST else n


NEEDS = tuple(parse_software_need(t) for t in ("cuda>=12.4", "cuda>=11.8", "cann>=8.0.RC1"))
TAINTS = tuple(
    parse_taint("t", t)
    for t in ("gpu=true:NoSchedule", "team=a:NoSchedule", "spot:PreferNoSchedule")
)
TOLERATIONS = tuple(
    parse_toleration("t", t) for t in ("gpu=true", "gpu:NoSchedule", "*", "spot", "team=b")
)


@st.composite
def nodes(draw: st.DrawFn, max_nodes: int = 6, capacity: bool = False) -> list[Node]:
    """Up to ``max_nodes`` nodes; with ``capacity``, each node's cards get a random task limit and
    over-commit factors (docs/capacity.md), often none."""
    out = []
    for i in range(draw(st.integers(1, max_nodes))):
        vendor, model, mem, drivers = draw(st.sampled_from(KINDS))
        limits = {}
        if capacity:
            limits = {
                "max_tasks": draw(st.sampled_from([None, 1, 2, 3])),
                "memory_overcommit": draw(st.sampled_from([1.0, 1.0, 1.3, 1.5, 2.0])),
                "cores_overcommit": draw(st.sampled_from([1.0, 1.0, 1.25, 2.0, 3.0])),
            }
        count = draw(st.integers(0, 10))
        group_size = draw(st.sampled_from([0, 1, 2, 4]))
        numa_size = draw(st.sampled_from([0, 2, 4, 8]))  # 0: NUMA nodes not reported
        driver = draw(st.sampled_from(drivers))
        devs = tuple(
            Device(
                uuid=f"n{i}-d{j}",
                vendor=vendor,
                model=model,
                memory_mib=mem - draw(st.integers(0, 7)),  # odd sizes exercise rounding
                index=j,
                driver_version=driver,
                link_group=None if group_size == 0 else f"g{j // group_size}",
                numa_node=None if numa_size == 0 else j // numa_size,
                share_mode=draw(st.sampled_from([None, None, "hami-core", "mps", "mig"])),
                healthy=draw(st.integers(0, 9)) > 0,
                **limits,  # type: ignore[arg-type]
            )
            for j in range(count)
        )
        taints = draw(_sometimes(st.sampled_from(TAINTS), 2))
        out.append(
            Node(
                f"n{i}",
                draw(st.integers(2, 64)) * 1000,
                draw(st.integers(4, 256)) * 1024,
                devs,
                taints=tuple(dict.fromkeys(taints)),  # type: ignore[arg-type]
            )
        )
    return out


def _sometimes(
    items: st.SearchStrategy[object], max_size: int
) -> st.SearchStrategy[tuple[object, ...]]:
    """Usually no constraint (so placements succeed often), sometimes a short list."""
    return st.one_of(st.just(()), st.just(()), st.lists(items, max_size=max_size).map(tuple))


@st.composite
def requests(draw: st.DrawFn) -> Request:
    count = draw(st.sampled_from([0, 1, 1, 1, 2, 2, 4, 5]))
    dev = DeviceRequest()
    if count:
        shape = draw(st.sampled_from(["whole", "permille", "mib", "cores"]))
        kwargs: dict[str, object] = {}
        if shape == "permille":
            kwargs["memory_permille"] = draw(st.integers(1, 1000))
            kwargs["core_permille"] = draw(st.one_of(st.none(), st.integers(1, 1000)))
        elif shape == "mib":
            kwargs["memory_mib"] = draw(st.integers(1, 100_000))
        elif shape == "cores":
            kwargs["core_permille"] = draw(st.integers(1, 1000))
        dev = DeviceRequest(
            count=count,
            models=tuple(
                draw(st.lists(st.sampled_from(["A100", "T4", "910B", "MI300X"]), max_size=2))
            ),
            vendors=tuple(draw(st.lists(st.sampled_from(["nvidia", "huawei", "amd"]), max_size=1))),
            software=tuple(draw(st.lists(st.sampled_from(NEEDS), max_size=1))),
            topology=draw(st.sampled_from(list(Topology))),
            exclude_uuids=draw(_sometimes(st.sampled_from(["n0-d0", "n1-d1"]), 1)),
            share_modes=draw(_sometimes(st.sampled_from(["hami-core", "mps"]), 2)),
            **kwargs,  # type: ignore[arg-type]
        )
    return Request(
        "r",
        cpu_milli=draw(st.integers(0, 8)) * 1000,
        memory_mib=draw(st.integers(0, 16)) * 1024,
        devices=dev,
        replicas=draw(st.integers(1, 3)),
        gang=draw(st.booleans()),
        node_policy=draw(st.sampled_from([None, "binpack", "spread", "topology", "random"])),
        tolerations=tuple(set(draw(_sometimes(st.sampled_from(TOLERATIONS), 2)))),  # type: ignore[arg-type]
    )
