"""Site choice per job, in process: three sites of 1,000 nodes each (issue 51's first benchmark).

    python bench/federation.py --json

Three sites of different card mixes (``placement.py``'s kinds: NVIDIA-heavy, Ascend and AMD-heavy,
mixed) joined by links of 100, 25 and 10 Gbit/s, with three datasets held at one site each. The
pool is first filled to ``--fill`` of its device memory with ``placement.py``'s mixed stream; then
``--jobs`` requests of the same stream, a third naming a dataset, are each given to
:class:`~xpupool.engine.site_choice.SiteChooser` (one rolled-back what-if per site, the engine's
own FGD measure of the stream's target workload, shared with its placements as on the plane, the
ranking) and placed in the site it chose, so the state moves as it would. Prints the choice's
time per job (p50, p99, mean, ms; and in the thread's CPU time, which a loaded machine's other
processes do not stretch) and how the choices fell. One core, one process; goal p99 <=
5 ms (DESIGN.md section 7).

    python bench/federation.py --study --seed 42 --json

The study of issue 51 instead: the timed replay of the Alibaba ``default`` trace over the three
sites of ``examples/sites-sim.yaml`` (``xpupool simulate --mode timed --sites``, the same code),
once per data setting (every dataset's size scaled: ``tiny`` x0.01, ``comparable`` x1, the file's,
``dominant`` x20) and site rule (xpupool, least-loaded, random): mean and p95 wait, GiB moved.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import Counter
from dataclasses import replace

import numpy as np

from placement import KINDS, build_cluster, request_stream
from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.engine.gang_sites import within_sites
from xpupool.engine.site_choice import RunTimes, SiteChooser
from xpupool.model import Node
from xpupool.model.site_network import parse_network

SITES = ("beijing", "shanghai", "shenzhen")
# per site, the weight of each of placement.py's eight kinds: different card mixes
MIXES = (
    np.array([0.35, 0.25, 0.2, 0.2, 0.0, 0.0, 0.0, 0.0]),
    np.array([0.0, 0.0, 0.0, 0.1, 0.5, 0.2, 0.2, 0.0]),
    np.array([0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2]),
)
NETWORK = {
    "links": [
        {"sites": ["beijing", "shanghai"], "bandwidth_gbps": 100, "latency_ms": 25},
        {"sites": ["shanghai", "shenzhen"], "bandwidth_gbps": 25, "latency_ms": 20},
        {"sites": ["beijing", "shenzhen"], "bandwidth_gbps": 10, "latency_ms": 40},
    ],
    "datasets": {
        "imagenet": {"size": "150Gi", "sites": ["beijing"]},
        "laion": {"size": "2Ti", "sites": ["shanghai"]},
        "c4": {"size": "800Gi", "sites": ["shenzhen"]},
    },
}


def three_sites(per_site: int, seed: int) -> list[Node]:
    """``per_site`` nodes in each of :data:`SITES`, each site of its own card mix."""
    nodes: list[Node] = []
    for s, (site, mix) in enumerate(zip(SITES, MIXES, strict=True)):
        pool = build_cluster(per_site * 4, seed + s)
        wanted = {k.model for k, w in zip(KINDS, mix, strict=True) if w > 0}
        kept = [n for n in pool if n.devices[0].model in wanted][:per_site]
        for i, n in enumerate(kept):
            cards = tuple(replace(d, uuid=f"{site}-{d.uuid}") for d in n.devices)
            nodes.append(replace(n, name=f"{site}-{i:05d}", site=site, devices=cards))
    return nodes


SETTINGS = {"tiny": 0.01, "comparable": 1.0, "dominant": 20.0}


def study(seed: int, compress: float) -> dict[str, object]:
    """Per data setting and site rule, the timed replay's figures (see the module docstring)."""
    from pathlib import Path

    import yaml

    from xpupool.sim.runner import RunSpec, run_timed
    from xpupool.sim.site_dispatch import RULES, parse_sim_sites
    from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

    root = Path(__file__).resolve().parents[1]
    base = yaml.safe_load((root / "examples" / "sites-sim.yaml").read_text())
    nodes = default_nodes()
    spec = RunSpec(str(nodes), str(nodes.parent / DEFAULT_PODS), "xpupool", seed)
    out: dict[str, object] = {"seed": seed, "compress": compress, "settings": {}}
    for name, scale in SETTINGS.items():
        data = dict(base)
        data["datasets"] = {
            k: {**v, "size": f"{parse_size_gib(v['size']) * scale:g}Gi"}
            for k, v in base["datasets"].items()
        }
        sites = parse_sim_sites(data)
        rows = {}
        for rule in RULES:
            run = run_timed(spec, "priority", compress, None, sites, rule)
            rows[rule] = {k: run[k] for k in ("mean_wait_s", "p95_wait_s", "gib_moved")}
        out["settings"][name] = rows  # type: ignore[index]
    return out


def parse_size_gib(text: str) -> float:
    from xpupool.model.quantity import parse_memory_mib

    return parse_memory_mib("size", text) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes-per-site", type=int, default=1000)
    parser.add_argument("--fill", type=float, default=0.6, help="device memory filled first")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--study", action="store_true", help="the timed replay study instead")
    parser.add_argument("--compress", type=float, default=50000.0, help="--study: arrivals")
    args = parser.parse_args()
    if args.study:
        print(json.dumps(study(args.seed, args.compress)))
        return
    kernels.warm()
    nodes = three_sites(args.nodes_per_site, args.seed)
    state = ClusterState(nodes, seed=7)
    workload = TargetWorkload.from_requests(itertools.islice(request_stream(args.seed), 5000))
    engine = Engine(state, "xpupool", seed=7, workload=workload)
    total = float(state.dev_mem_total.sum())
    stream = request_stream(args.seed + 100)
    for req in stream:  # fill the pool: not timed
        engine.place(req)
        if 1.0 - state.dev_mem_free.sum() / total >= args.fill:
            break
    network = parse_network(NETWORK)
    times = RunTimes()
    # the engine's own measure (its profile's, of the same workload), whose cache of
    # fragmentation after placement the choice shares with the placements, as the plane's does
    chooser = SiteChooser(engine, network, times)
    chooser.warm()  # as a front does when it builds its engine: not timed
    names = sorted(network.datasets)
    rng = np.random.default_rng(args.seed)
    latencies: list[float] = []
    cpu_s: list[float] = []  # the thread's CPU time: what the choice costs, whatever the load
    chosen: Counter[str] = Counter()
    placed = 0
    for req in itertools.islice(stream, args.jobs):
        if rng.random() < 1 / 3:
            req = replace(req, data=names[int(rng.integers(len(names)))])
        times.record(req, float(rng.integers(60, 7200)))
        start, cpu = time.perf_counter(), time.thread_time()
        choice = chooser.choose(req)
        latencies.append(time.perf_counter() - start)
        cpu_s.append(time.thread_time() - cpu)
        if choice is None:
            chosen["none"] += 1
            continue
        chosen[choice.chosen.site] += 1
        if choice.chosen.fits_now:
            placed += engine.place(within_sites(req, (choice.chosen.site,))).ok
    lat = np.asarray(latencies) * 1e3
    cpu_ms = np.asarray(cpu_s) * 1e3
    out = {
        "sites": len(SITES),
        "nodes": state.n_nodes,
        "devices": state.n_devices,
        "fill_before": args.fill,
        "jobs": len(latencies),
        "choice_p50_ms": round(float(np.percentile(lat, 50)), 3),
        "choice_p99_ms": round(float(np.percentile(lat, 99)), 3),
        "choice_mean_ms": round(float(lat.mean()), 3),
        "choice_cpu_p50_ms": round(float(np.percentile(cpu_ms, 50)), 3),
        "choice_cpu_p99_ms": round(float(np.percentile(cpu_ms, 99)), 3),
        "placed": placed,
        "chosen": dict(sorted(chosen.items())),
        "device_memory_allocated_pct": round(100 * (1 - state.dev_mem_free.sum() / total), 1),
    }
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
