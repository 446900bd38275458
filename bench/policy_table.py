"""xpupool's default policy against FGD and BestFit on every Alibaba trace, FGD protocol.

    python bench/policy_table.py --jobs 2 [--traces default,cpu250] [--policies xpupool,fgd,bestfit]
        [--out docs/results/placement-policy-results.jsonl] [--reuse] [--plot docs/placement-policy.png]

For each trace in ``../shared/traces/alibaba-gpu-v2023`` and each policy, replays seeds 42..51 and
records mean and sd of unallocated GPU % at arrived = 100 %, one JSON line per (trace, policy) in
``--out``; ``--reuse`` keeps lines already there instead of re-running them. Then prints the markdown
table of docs/placement-policy.md and the README: each policy's mean +- sd, the authors' FGD and
BestFit means where they published the trace, and xpupool's change against our FGD. About 30 minutes
for everything on 2 cores.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xpupool.sim.runner import RunSpec, run_all, summarise

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"
DEFAULT_OUT = (
    Path(__file__).resolve().parents[1] / "docs" / "results" / "placement-policy-results.jsonl"
)


def all_traces(data: Path) -> list[str]:
    names = sorted(
        p.stem.removeprefix("openb_pod_list_") for p in data.glob("openb_pod_list_*.csv")
    )
    return ["default"] + [n for n in names if n != "default"]


def load(out: Path) -> dict[tuple[str, str], dict[str, object]]:
    if not out.exists():
        return {}
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(str(r["trace"]), str(r["policy"])): r for r in rows}


def measure(data: Path, trace: str, policy: str, seeds: range, jobs: int) -> dict[str, object]:
    specs = [
        RunSpec(
            str(data / "openb_node_list_gpu_node.csv"),
            str(data / f"openb_pod_list_{trace}.csv"),
            policy,
            seed,
        )
        for seed in seeds
    ]
    runs = run_all(specs, jobs=jobs)
    summary = summarise(runs, f"openb_pod_list_{trace}", data / "fgd_expected_results")[policy]
    return {
        "trace": trace,
        "policy": policy,
        "seeds": f"{seeds.start}-{seeds.stop - 1}",
        "mean": summary["mean"],
        "sd": summary["sd"],
        "paper_mean": summary["paper_mean"],
        "max_seconds": max(float(r["seconds"]) for r in runs),  # type: ignore[arg-type]
        "per_seed": [r["unallocated_pct_at_100"] for r in runs],
    }


def run_arguments(parser: argparse.ArgumentParser, out: Path) -> None:
    """The options this table and ``heldout.py`` share: what to run and where results go."""
    parser.add_argument("--policies", default="xpupool,fgd,bestfit")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--reuse", action="store_true", help="keep results already in --out")


def seed_range(text: str) -> range:
    """``42-51`` -> seeds 42..51."""
    low, high = (int(x) for x in text.split("-"))
    return range(low, high + 1)


def record(
    results: dict[tuple[str, str], dict[str, object]],
    key: tuple[str, str],
    row: dict[str, object],
    out: Path,
) -> None:
    """Keep ``row``, print it (without its per-seed values) and rewrite ``out`` with all results,
    so an interrupted run keeps what it measured."""
    results[key] = row
    print(json.dumps({k: v for k, v in row.items() if k != "per_seed"}), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in results.values()))


def table(results: dict[tuple[str, str], dict[str, object]], traces: list[str]) -> str:
    def cell(trace: str, policy: str) -> str:
        r = results.get((trace, policy))
        return "" if r is None else f"{float(r['mean']):.2f} ± {float(r['sd']):.2f}"  # type: ignore[arg-type]

    def paper(trace: str, policy: str) -> str:
        r = results.get((trace, policy))
        return "" if r is None or r["paper_mean"] is None else f"{float(r['paper_mean']):.2f}"  # type: ignore[arg-type]

    lines = [
        "| trace | xpupool | fgd | bestfit | paper fgd | paper bestfit | xpupool vs fgd |",
        "|---|---|---|---|---|---|---|",
    ]
    for trace in traces:
        ours, fgd = results.get((trace, "xpupool")), results.get((trace, "fgd"))
        change = ""
        if ours and fgd:
            a, b = float(ours["mean"]), float(fgd["mean"])  # type: ignore[arg-type]
            change = f"{100 * (a - b) / b:+.1f} %"
        lines.append(
            f"| {trace} | {cell(trace, 'xpupool')} | {cell(trace, 'fgd')} | "
            f"{cell(trace, 'bestfit')} | {paper(trace, 'fgd')} | {paper(trace, 'bestfit')} | "
            f"{change} |"
        )
    return "\n".join(lines)


def plot(results: dict[tuple[str, str], dict[str, object]], traces: list[str], path: Path) -> None:
    """Grouped bars per trace (mean, sd whiskers) with the authors' FGD mean as a marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = [p for p in ("xpupool", "fgd", "bestfit") if any(k[1] == p for k in results)]
    fig, ax = plt.subplots(figsize=(14, 4.8))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        xs, means, sds = [], [], []
        for j, trace in enumerate(traces):
            r = results.get((trace, policy))
            if r is not None:
                xs.append(j + (i - (len(policies) - 1) / 2) * width)
                means.append(float(r["mean"]))  # type: ignore[arg-type]
                sds.append(float(r["sd"]))  # type: ignore[arg-type]
        ax.bar(xs, means, width, yerr=sds, capsize=2, label=policy)
    paper = [
        (j, float(r["paper_mean"]))  # type: ignore[arg-type]
        for j, trace in enumerate(traces)
        if (r := results.get((trace, "fgd"))) is not None and r["paper_mean"] is not None
    ]
    if paper:
        px = [x for x, _ in paper]
        py = [y for _, y in paper]
        ax.scatter(px, py, marker="_", s=300, color="k", label="fgd (paper)", zorder=3)
    ax.set_xticks(range(len(traces)), traces, rotation=45, ha="right")
    ax.set_ylabel("unallocated GPU % at arrived = 100 %")
    ax.set_title("Alibaba GPU traces, FGD protocol, seeds 42..51 (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=TRACES)
    parser.add_argument("--traces", help="comma-separated short names (default: all)")
    run_arguments(parser, DEFAULT_OUT)
    parser.add_argument("--plot", type=Path, help="also draw the table as a PNG here")
    args = parser.parse_args()
    traces = args.traces.split(",") if args.traces else all_traces(args.data)
    seeds = seed_range(args.seeds)
    results = load(args.out)
    for trace in traces:
        for policy in args.policies.split(","):
            if args.reuse and (trace, policy) in results:
                continue
            row = measure(args.data, trace, policy, seeds, args.jobs)
            record(results, (trace, policy), row, args.out)
    shown = [t for t in all_traces(args.data) if any(k[0] == t for k in results)]
    print(table(results, shown))
    if args.plot:
        plot(results, shown, args.plot)


if __name__ == "__main__":
    main()
