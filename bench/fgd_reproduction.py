"""Reproduce the FGD paper's results on every trace the authors published results for.

    python bench/fgd_reproduction.py --jobs 2 [--traces default,cpu050] [--json]

For each trace in ``fgd_expected_results`` and each of the six policies, runs seeds 42..51 with the
paper's protocol and prints a markdown table: our mean +- sd of unallocated GPU % at arrived = 100 %,
the authors' mean, the difference, and seconds per replay. About 13 minutes for all 13 traces on 2
cores.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from xpupool.sim.expected import PAPER_POLICIES
from xpupool.sim.runner import RunSpec, run_all, summarise

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"


def published_traces(expected: Path) -> list[str]:
    with open(expected / "analysis_allo_discrete.csv", newline="") as f:
        return sorted({row["workload"] for row in csv.DictReader(f)})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=TRACES)
    parser.add_argument("--traces", help="comma-separated short names (default: all published)")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    expected = args.data / "fgd_expected_results"
    traces = published_traces(expected)
    if args.traces:
        wanted = {f"openb_pod_list_{t}" for t in args.traces.split(",")}
        traces = [t for t in traces if t in wanted]
    low, high = (int(x) for x in args.seeds.split("-"))
    policies = list(PAPER_POLICIES.values())
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    print("| trace | " + " | ".join(policies) + " | max s/run (fgd, others) |")
    print("|---" * (len(policies) + 2) + "|")
    for trace in traces:
        specs = [
            RunSpec(
                str(args.data / "openb_node_list_gpu_node.csv"),
                str(args.data / f"{trace}.csv"),
                policy,
                seed,
            )
            for policy in policies
            for seed in range(low, high + 1)
        ]
        runs = run_all(specs, jobs=args.jobs)
        summary = summarise(runs, trace, expected)
        for policy in policies:
            seconds = [float(r["seconds"]) for r in runs if r["policy"] == policy]  # type: ignore[arg-type]
            summary[policy]["max_seconds"] = round(max(seconds), 2)
        out[trace] = summary
        cells = []
        for policy in policies:
            f = summary[policy]
            paper = f["paper_mean"]
            diff = "" if paper is None else f" ({(f['mean'] or 0) - paper:+.2f})"
            cells.append(f"{f['mean']:.2f} ± {f['sd']:.2f} / {paper:.2f}{diff}")
        fgd_s = summary["fgd"]["max_seconds"]
        other_s = max(summary[p]["max_seconds"] or 0 for p in policies if p != "fgd")
        print(
            f"| {trace.replace('openb_pod_list_', '')} | "
            + " | ".join(cells)
            + f" | {fgd_s}, {other_s} |",
            flush=True,
        )
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
