"""Pods bound per second, creation -> bind latency, pods left pending and stranded GPU memory on a
real control plane: kube-scheduler alone against kube-scheduler with xpupool's extender.

    python bench/k8s_e2e.py --nodes 1000 --pods 4000 --json

For each stack, one after the other, on a fresh cluster each (etcd, kube-apiserver v1.36.3 and
kwok v0.8.0 as local processes, from tools/k8s/build.sh): ``--nodes`` kwok nodes of 8 cards of
four NVIDIA models with HAMi's registration annotation, then the stack's scheduler, then
``--pods`` pods of one seeded stream (fractional shares, amounts of memory, whole cards, 2/4/8
cards, a third typed), created 16 at a time as fast as the apiserver takes them. The stacks:

- ``kube_scheduler``: kube-scheduler alone; nodes advertise ``nvidia.com/gpu`` 1 a card and pods
  ask whole cards only (a share becomes a whole card, a type a nodeSelector on
  ``nvidia.com/gpu.product``), as a cluster with NVIDIA's device plugin and no HAMi does.
- ``xpupool``: kube-scheduler with ``xpupool k8s extender`` (a real process, default profile)
  as extender for the HAMi resources; nodes advertise 10 a card (HAMi's split count); pods ask
  as HAMi users write them.

Per stack: ``pods_per_s`` (bound pods / first create sent -> last bind seen), ``bind_p50_ms`` and
``bind_p99_ms`` (create sent -> a watch sees ``spec.nodeName``), ``pending`` and the top
``pending_reasons`` (kube-scheduler's PodScheduled message), and, from the end state replayed
into the engine, ``stranded_gpu_memory_pct`` (the engine's stranded-capacity function for the
stream's target workload), ``idle_gpu_memory_pct`` and ``granted_unasked_gpu_memory_pct`` (card
memory granted beyond what pods asked: whole cards for shares); ``first_unschedulable``: the first
pod kube-scheduler found no node for, and the stranded and idle memory of the pods bound by then.
A run ends when every pod is
bound or none has been bound for ``--settle`` seconds. The harness is ``bench/k8s_harness.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from k8s_harness import (
    KubeSchedulerAlone,
    Stack,
    XpupoolStack,
    ask_requests,
    figures,
    pod_stream,
    run_stack,
)

STACKS: dict[str, type[KubeSchedulerAlone] | type[XpupoolStack]] = {
    "kube_scheduler": KubeSchedulerAlone,
    "xpupool": XpupoolStack,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated, in order")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds without a bind")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per stack")
    parser.add_argument("--workdir", type=Path, help="keep logs here [default: a temp dir]")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    names = args.stacks.split(",")
    unknown = [n for n in names if n not in STACKS]
    if unknown:
        parser.error(f"--stacks: unknown {unknown}; known: {', '.join(STACKS)}")
    if args.nodes < 1 or args.pods < 1:
        parser.error("--nodes and --pods must be at least 1")
    asks = pod_stream(args.pods, args.seed)
    workload = ask_requests(asks)

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    out: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="xpupool-k8s-e2e-") as tmp:
        root = args.workdir or Path(tmp)
        for name in names:
            stack: Stack = STACKS[name]()
            result = run_stack(
                stack,
                args.nodes,
                asks,
                root / name,
                seed=args.seed,
                settle_s=args.settle,
                timeout_s=args.timeout,
                log=log,
            )
            out[name] = figures(result, workload)
            log(f"{name}: {json.dumps(out[name])}")
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
