"""Placement throughput and latency of the engine on a synthetic heterogeneous cluster.

    python bench/placement.py --nodes 5000 --json

Builds N nodes x 8 devices over 8 models from 6 vendors with mixed drivers and link groups, then
streams a mixed workload (fractional, whole, multi-device with and without same-link-group, typed,
with software needs, some CPU-only) until ~90 % of device memory is allocated. Every request is fully
filtered and scored over all nodes (no sampling). Prints, per policy, placements/s (placed replicas
per second of engine time) and the p99 latency of one ``Engine.place`` call, leaving out the first
call, which builds what a policy learns once (reported as ``first_call_s``), and the device
capacity stranded at the end for the stream's target workload (``stranded_capacity``: idle compute
and memory no shape of it can use), after the timing. One core, one process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import ShapeTable, TargetWorkload, kernels, stranded_capacity
from xpupool.model import Device, DeviceRequest, Node, Request, Topology, parse_software_need


@dataclass(frozen=True)
class NodeKind:
    vendor: str
    model: str
    memory_mib: int
    drivers: tuple[str, ...]
    group_size: int  # devices per link group; 0 = PCIe only
    runtimes: tuple[tuple[str, str], ...] = ()


KINDS: tuple[NodeKind, ...] = (
    NodeKind("nvidia", "NVIDIA A100-SXM4-80GB", 81920, ("535.104.05", "550.54.15"), 4),
    NodeKind("nvidia", "NVIDIA H100 80GB HBM3", 81559, ("550.54.15", "560.35.03"), 8),
    NodeKind("nvidia", "NVIDIA L20", 46068, ("535.104.05", "550.90.07"), 0),
    NodeKind("nvidia", "Tesla T4", 15360, ("470.82.01", "525.60.13"), 0),
    NodeKind("huawei", "910B3", 65536, ("23.0.0", "24.1.rc2"), 8),
    NodeKind("cambricon", "MLU370-X8", 49152, ("5.10.22",), 4),
    NodeKind("hygon", "K100_AI", 65536, ("6.3.8",), 0),
    NodeKind("amd", "AMD Instinct MI300X", 196592, ("6.7.0", "6.8.5"), 8),
)
KIND_WEIGHTS = np.array([0.22, 0.12, 0.14, 0.12, 0.16, 0.08, 0.08, 0.08])


def build_cluster(n_nodes: int, seed: int) -> list[Node]:
    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(KINDS), size=n_nodes, p=KIND_WEIGHTS)
    nodes = []
    for i, k in enumerate(kinds):
        kind = KINDS[int(k)]
        driver = kind.drivers[int(rng.integers(len(kind.drivers)))]
        devices = tuple(
            Device(
                uuid=f"dev-{i:05d}-{j}",
                vendor=kind.vendor,
                model=kind.model,
                memory_mib=kind.memory_mib,
                index=j,
                driver_version=driver,
                link_group=None if kind.group_size == 0 else f"g{j // kind.group_size}",
            )
            for j in range(8)
        )
        nodes.append(Node(f"node-{i:05d}", 128_000, 1_048_576, devices, site=f"site-{i % 3}"))
    return nodes


CUDA_124 = parse_software_need("cuda>=12.4")
CUDA_121 = parse_software_need("cuda>=12.1")
CANN_80 = parse_software_need("cann>=8.0.RC1")
MODEL_CHOICES: tuple[tuple[str, ...], ...] = (
    (),
    ("A100", "H100"),
    ("910B",),
    ("L20",),
    ("MI300X",),
)


def request_stream(seed: int) -> Iterator[Request]:
    """A reproducible, endless mixed stream (made lazily: building requests is not what we time)."""
    rng = np.random.default_rng(seed + 1)
    for i in itertools.count():
        roll = rng.random()
        models = MODEL_CHOICES[int(rng.integers(len(MODEL_CHOICES)))] if rng.random() < 0.5 else ()
        software: tuple[object, ...] = ()
        soft_roll = rng.random()
        if soft_roll < 0.15:
            software = (CUDA_124,)
        elif soft_roll < 0.25:
            software = (CUDA_121,)
        elif soft_roll < 0.3:
            software = (CANN_80,)
        if roll < 0.40:  # fractional share of one card
            dev = DeviceRequest(
                count=1,
                memory_permille=_pick(rng, (100, 250, 500)),
                core_permille=_pick(rng, (100, 250, 500)),
                models=models,
                software=software,  # type: ignore[arg-type]
            )
        elif roll < 0.50:  # an amount of memory
            dev = DeviceRequest(count=1, memory_mib=_pick(rng, (8192, 16384, 24576)), models=models)
        elif roll < 0.75:  # one whole card
            dev = DeviceRequest(count=1, models=models, software=software)  # type: ignore[arg-type]
        elif roll < 0.95:  # several whole cards
            count = _pick(rng, (2, 4, 8))
            topo = Topology.SAME_LINK_GROUP if rng.random() < 0.5 else Topology.NONE
            dev = DeviceRequest(count=count, models=models, topology=topo)
        else:
            dev = DeviceRequest()
        yield Request(f"r{i}", _pick(rng, (1000, 4000, 8000)), 8192, dev)


def _pick(rng: np.random.Generator, values: tuple[int, ...]) -> int:
    return values[int(rng.integers(len(values)))]


def run_policy(nodes: list[Node], policy: str, fill: float, seed: int) -> dict[str, float]:
    """Stream requests with ``policy`` until ``fill`` of device memory is taken; the figures."""
    state = ClusterState(nodes, seed=7)
    # FGD learns its target workload from the requests, as it does from a trace: here the
    # first 5,000 of the same stream.
    workload = TargetWorkload.from_requests(itertools.islice(request_stream(seed), 5000))
    engine = Engine(state, policy, seed=7, workload=workload)
    total_mem = float(state.dev_mem_total.sum())
    latencies: list[float] = []
    placed = first_placed = 0
    failed_in_row = 0
    for i, req in enumerate(request_stream(seed)):
        start = time.perf_counter()
        result = engine.place(req)
        latencies.append(time.perf_counter() - start)
        if result.ok:
            placed += len(result.allocations)
            failed_in_row = 0
        else:
            failed_in_row += 1
        if i == 0:
            first_placed = placed
        if i % 256 == 0 and 1.0 - state.dev_mem_free.sum() / total_mem >= fill:
            break
        if failed_in_row > 2000:
            break
    # The first call builds what the policy learns once (FGD's shape table; xpupool's lookahead
    # also every node's deltas for the next shapes):
    # reported on its own, and left out of the steady-state figures.
    first, latencies = latencies[0], latencies[1:]
    placed -= first_placed
    engine_seconds = sum(latencies)
    lat = np.asarray(latencies)
    stranded = stranded_capacity(state, ShapeTable(state, engine.pipeline, workload))
    return {
        "first_call_s": round(first, 2),
        "placements_per_s": round(placed / engine_seconds, 1),
        "requests_per_s": round(len(latencies) / engine_seconds, 1),
        "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
        "requests": len(latencies),
        "placed": placed,
        "device_memory_allocated_pct": round(100 * (1 - state.dev_mem_free.sum() / total_mem), 1),
        "stranded_device_cores_pct": round(
            100 * stranded.total_core_milli / float(state.dev_core_commit.sum()), 2
        ),
        "stranded_device_memory_gib": round(stranded.total_memory_mib / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--policies", default="binpack,spread,topology,fgd,xpupool")
    parser.add_argument("--fill", type=float, default=0.9, help="stop at this device-memory fill")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    nodes = build_cluster(args.nodes, args.seed)
    kernels.warm()  # the compiled loops loaded (compiled, on a fresh machine) before any timing
    state = ClusterState(nodes)
    out: dict[str, object] = {"nodes": state.n_nodes, "devices": state.n_devices, "policy": {}}
    for policy in args.policies.split(","):
        figures = run_policy(nodes, policy, args.fill, args.seed)
        out["policy"][policy] = figures  # type: ignore[index]
        if not args.json:
            print(policy, figures, flush=True)
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
