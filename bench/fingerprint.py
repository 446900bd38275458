"""A fingerprint of the engine's placements: proof that a refactor changed nothing it should not.

    python bench/fingerprint.py [--json] [--check docs/results/placement-fingerprint.json] [--jobs 2]

Replays two seeds of three Alibaba traces (FGD protocol, no departures) with four policies and
hashes every placement (task, node, devices with their memory and core shares, CPU, memory), then
streams the 5,000-node mixed stream of ``bench/placement.py`` for a fixed number of requests with
binpack and xpupool and hashes those placements too, with the placed counts beside them; xpupool
streams it a second time without a target workload, learning one online as the embedded server and
the Kubernetes extender do (``/online``). Prints one
JSON object; ``--check FILE`` compares it with a stored one and exits 1 naming what differs, and
``--write FILE`` stores it. Runs in about a minute on two cores with ``--jobs 2``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement import build_cluster, request_stream
from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.model.allocation import Allocation
from xpupool.sim.alibaba import capacity_milli, read_nodes, read_tasks, to_request
from xpupool.sim.fgd_protocol import tuned_workload

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"
TRACES = ("default", "gpushare100", "multigpu50")
SEEDS = (42, 43)
TRACE_POLICIES = ("binpack", "bestfit", "fgd", "xpupool")
STREAM_POLICIES = ("binpack", "xpupool")
STREAM_NODES = 5000
STREAM_REQUESTS = 4000


def _digest(allocations: Iterable[tuple[int, Allocation]]) -> str:
    h = hashlib.sha256()
    for i, a in allocations:
        shares = ",".join(f"{d.uuid}:{d.memory_mib}:{d.core_permille}" for d in a.devices)
        h.update(f"{i}|{a.replica}|{a.node}|{a.cpu_milli}|{a.memory_mib}|{shares}\n".encode())
    return h.hexdigest()[:16]


def trace_run(trace: str, seed: int, policy: str) -> tuple[str, dict[str, object]]:
    """One FGD-protocol replay of ``trace``: its placement hash and how many tasks failed."""
    kernels.warm()
    nodes = read_nodes(str(TRACES_DIR / "openb_node_list_gpu_node.csv"))
    name = "openb_pod_list_default" if trace == "default" else f"openb_pod_list_{trace}"
    tasks = read_tasks(str(TRACES_DIR / f"{name}.csv"))
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    engine = Engine(ClusterState(nodes, seed=seed), policy, seed=seed, workload=workload)
    placed: list[tuple[int, Allocation]] = []
    failed = 0
    for i, task in enumerate(tuned_workload(tasks, capacity_milli(nodes), seed)):
        result = engine.place(to_request(task))
        placed.extend((i, a) for a in result.allocations)
        failed += not result.ok
    return f"{trace}/{seed}/{policy}", {"hash": _digest(placed), "failed": failed}


def stream_run(policy: str, online: bool = False) -> tuple[str, dict[str, object]]:
    """The first requests of the 5,000-node mixed stream: placement hash and placed count. With
    ``online`` the engine has no target workload and learns one from the requests."""
    kernels.warm()
    nodes = build_cluster(STREAM_NODES, 1)
    workload = None
    if not online:
        workload = TargetWorkload.from_requests(itertools.islice(request_stream(1), 5000))
    engine = Engine(ClusterState(nodes, seed=7), policy, seed=7, workload=workload)
    placed: list[tuple[int, Allocation]] = []
    for i, req in enumerate(itertools.islice(request_stream(1), STREAM_REQUESTS)):
        placed.extend((i, a) for a in engine.place(req).allocations)
    key = f"stream{STREAM_NODES}/{policy}" + ("/online" if online else "")
    return key, {"hash": _digest(placed), "placed": len(placed)}


def fingerprint(jobs: int) -> dict[str, dict[str, object]]:
    runs: list[tuple[Callable[..., tuple[str, dict[str, object]]], tuple[object, ...]]] = [
        (trace_run, (t, s, p)) for t in TRACES for s in SEEDS for p in TRACE_POLICIES
    ]
    runs += [(stream_run, (p,)) for p in STREAM_POLICIES]
    runs.insert(0, (stream_run, ("xpupool", True)))  # the longest first
    if jobs <= 1:
        results = [fn(*args) for fn, args in runs]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(fn, *args) for fn, args in runs]
            results = [f.result() for f in futures]
    return dict(sorted(results))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--check", type=Path, help="compare with this stored fingerprint")
    parser.add_argument("--write", type=Path, help="store the fingerprint in this file")
    args = parser.parse_args()
    got = fingerprint(args.jobs)
    print(json.dumps(got, indent=None if args.json else 2, sort_keys=True))
    if args.write:
        args.write.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    if args.check:
        want = json.loads(args.check.read_text())
        differ = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        if differ:
            print(f"placements differ from {args.check}: {', '.join(differ)}", file=sys.stderr)
            return 1
        print(f"placements identical to {args.check} ({len(want)} runs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
