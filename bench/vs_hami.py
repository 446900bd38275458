"""xpupool side by side with HAMi's own scheduler on one real control plane (issue 24).

    python bench/vs_hami.py --nodes 1000 --pods 4000 --json

Needs ``tools/k8s/build.sh`` (etcd, kube-apiserver v1.36.3, kube-scheduler, kwok v0.8.0) and
``tools/k8s/build.sh --hami`` (HAMi's scheduler v2.10.0, commit 4707fb02c91c). For each stream,
each stack runs alone on a fresh cluster (new etcd) of ``--nodes`` kwok nodes of 8 cards (four
NVIDIA models, HAMi's registration annotation, ``nvidia.com/gpu`` 10 a card), and the stream is
sent to it once. The stacks (``bench/hami_stack.py``, ``bench/k8s_harness.py``):

- ``hami_binpack`` / ``hami_spread``: kube-scheduler with HAMi's scheduler as its extender (HAMi's
  chart configuration), pods annotated ``hami.io/node-scheduler-policy`` and
  ``hami.io/gpu-scheduler-policy`` both ``binpack`` or both ``spread``; a stand-in for HAMi's
  device plugin marks each bound pod ``hami.io/bind-phase: success`` and releases its node lock.
- ``xpupool``: kube-scheduler with ``xpupool k8s extender`` (default profile) as its extender,
  taking HAMi's node lock at each bind as HAMi's scheduler does (the nodes carry HAMi's
  registration annotation), with the same device-plugin stand-in releasing it; where HAMi refuses
  a bind to a locked node (kube-scheduler backs off), xpupool's bind waits for the release.

The streams (``bench/hami_streams.py``): ``hami-mix`` (``--pods`` HAMi-style asks), ``alibaba``
(the first ``--pods`` GPU tasks of the Alibaba trace's default mix in HAMi's resource names) and
``burst200`` (``--burst`` asks POSTed all at once).

Per stream and stack: ``pods_per_s``, ``bind_p50_ms``, ``bind_p99_ms``, ``pending``; the GPU
memory and compute stranded (the engine's one stranded-capacity function for the stream's own
asks as target workload) and idle, when the first pod was found unschedulable
(``stranded_gpu_memory_pct``, ``stranded_gpu_cores_pct``, ``idle_gpu_memory_pct``,
``idle_gpu_cores_pct``; ``measured_at`` says ``first_unschedulable``, or ``end`` when every pod
found a node) and at the end (``end``); ``double_allocations``: cards whose bound pods'
``hami.io/vgpu-devices-allocated`` grants (HAMi's and xpupool's binds both write it) exceed the
card's registered memory, cores or task count (``xpupool.k8s.codec.allocation_audit``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xpupool
from hami_stack import POLICIES, HamiStack, XpupoolHamiStack
from hami_streams import BURST, STREAMS, Stream, make_streams
from k8s_harness import (
    RunResult,
    Stack,
    ask_requests,
    bind_figures,
    capacity_figures,
    cluster,
    first_unschedulable_figures,
    run_stack,
)
from xpupool.k8s.codec.allocation_audit import audit_allocations

STACKS = ("hami_binpack", "hami_spread", "xpupool")
CAPACITY_KEYS = (
    "stranded_gpu_memory_pct",
    "stranded_gpu_cores_pct",
    "idle_gpu_memory_pct",
    "idle_gpu_cores_pct",
)


def make_stack(name: str) -> Stack:
    if name == "xpupool":
        return XpupoolHamiStack()
    policy = name.removeprefix("hami_")
    if policy not in POLICIES:
        raise ValueError(f"stack {name!r} is not one of {STACKS}")
    return HamiStack(policy=policy)


def stack_figures(result: RunResult, stream: Stream) -> dict[str, Any]:
    """The figures of one run (see the module docstring). The audit runs first and on its own:
    the capacity replay refuses an over-committed card, so a double allocation leaves the
    capacity figures None with ``capacity_error`` saying why, and the audit's findings stand."""
    workload = ask_requests(stream.asks)
    out = bind_figures(result)
    audit = audit_allocations(result.nodes, result.pods)
    out["double_allocations"] = audit.double_allocations
    out["over_capacity"] = [o.describe() for o in audit.over[:20]]
    out["audited"] = {"pods": audit.pods, "cards": audit.cards, "unreadable": len(audit.unreadable)}
    try:
        end = capacity_figures(result.nodes, result.pods, workload)
        first = first_unschedulable_figures(result, workload)
    except RuntimeError as exc:
        out |= dict.fromkeys(CAPACITY_KEYS) | {"capacity_error": str(exc), "end": None}
        out["measured_at"] = None
        return out
    at = first if first is not None else end
    out |= {k: at[k] for k in CAPACITY_KEYS}
    out["measured_at"] = "first_unschedulable" if first is not None else "end"
    out["first_unschedulable"] = first
    out["end"] = end
    return out


def versions() -> dict[str, str]:
    """What ran: the cache key of the Kubernetes binaries (their versions), etcd's Debian package,
    HAMi's tag, commit and source, xpupool's version, Python."""
    bins = cluster.bin_dir()
    out = {
        "kubernetes_binaries": bins.parent.name,
        "xpupool": xpupool.__version__,
        "python": platform.python_version(),
    }
    for name, file in (("etcd", "etcd.deb-version"), ("hami", "hami-scheduler.version")):
        path = bins / file
        out[name] = path.read_text().strip() if path.is_file() else "unknown"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=4000, help="asks of hami-mix and alibaba")
    parser.add_argument("--burst", type=int, default=BURST, help="asks of burst200")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma-separated, in order")
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated, in order")
    parser.add_argument("--trace", type=Path, help="pod list of the alibaba stream")
    parser.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="seconds without a bind that end a run: more than kube-scheduler's 10 s\n"
        "maximum backoff, which pods whose bind HAMi refused on a node lock wait out",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--workdir", type=Path, help="keep logs here [default: a temp dir]")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    stacks, names = args.stacks.split(","), args.streams.split(",")
    if bad := [s for s in stacks if s not in STACKS]:
        parser.error(f"--stacks: unknown {bad}; known: {', '.join(STACKS)}")
    if bad := [s for s in names if s not in STREAMS]:
        parser.error(f"--streams: unknown {bad}; known: {', '.join(STREAMS)}")
    if args.nodes < 1 or args.pods < 1 or args.burst < 1:
        parser.error("--nodes, --pods and --burst must be at least 1")
    needed = (*cluster.BINARIES, "kwok")
    if any(s != "xpupool" for s in stacks):
        needed += (cluster.HAMI_BINARY,)
    try:
        cluster.find_binaries(needed)
    except cluster.K8sBinariesMissingError as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    streams = make_streams(names, args.pods, args.seed, args.burst, args.trace)

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    out: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "burst": args.burst,
        "seed": args.seed,
        "streams": {},
        "versions": versions(),
    }
    with tempfile.TemporaryDirectory(prefix="xpupool-vs-hami-") as tmp:
        root = args.workdir or Path(tmp)
        for stream in streams:
            out["streams"][stream.name] = per_stack = {}
            for name in stacks:
                per_stack[name] = run_one(name, stream, args, root, log)
    print(json.dumps(out, indent=None if args.json else 2))


def run_one(
    name: str, stream: Stream, args: argparse.Namespace, root: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    result = run_stack(
        make_stack(name),
        args.nodes,
        stream.asks,
        root / stream.name / name,
        seed=args.seed,
        settle_s=args.settle,
        timeout_s=args.timeout,
        concurrency=stream.concurrency,
        log=lambda text: log(f"{stream.name}: {text}"),
    )
    got = stack_figures(result, stream)
    log(f"{stream.name}: {name}: {json.dumps(got)}")
    return got


if __name__ == "__main__":
    main()
