"""The simulator's results as terminal tables: ``xpupool simulate``'s summary per trace (beside the
FGD paper's figures) and its timed replays, one row per run.

They sit with the other tables every command prints (``fit_table.py``), above the simulator, which
returns plain result dicts (``sim/report.py``) and so stays below the command line.
"""

from __future__ import annotations

from rich.console import Console

from xpupool.client.fit_table import Column, FitTable


def print_summary(console: Console, result: dict[str, object]) -> None:
    runs: list[dict[str, object]] = result["runs"]  # type: ignore[assignment]
    summary: dict[str, dict[str, float | None]] = result["summary"]  # type: ignore[assignment]
    title = f"{result['trace']}: unallocated GPU % at arrived workload = 100 %"
    headers = ("policy", "xpupool mean ± sd", "paper mean", "difference", "stranded", "s / run")
    table = FitTable(
        [Column(h, justify="left" if h == "policy" else "right") for h in headers], title
    )
    for policy, figures in summary.items():
        seconds = [float(r["seconds"]) for r in runs if r["policy"] == policy]  # type: ignore[arg-type]
        paper = figures["paper_mean"]
        mean = figures["mean"] or 0.0
        table.add_row(
            policy,
            f"{mean:.2f} ± {figures['sd']:.2f}",
            "-" if paper is None else f"{paper:.2f}",
            "-" if paper is None else f"{mean - paper:+.2f}",
            "-" if figures.get("stranded_mean") is None else f"{figures['stranded_mean']:.2f}",
            f"{sum(seconds) / len(seconds):.2f}",
        )
    notes: list[str] = [str(n) for r in runs for n in r.get("notes", ())]  # type: ignore[attr-defined]
    captions = list(dict.fromkeys(notes))  # what each policy chose, once (the same every seed)
    if "lower_bound_pct" in result:
        captions.append(
            f"no policy can do better than {result['lower_bound_pct']:.2f} % here "
            "(packing bound: shares arrived by 100 % packed into the GPUs as an LP)"
        )
    captions.append(
        "stranded: idle GPU % no target shape can use at arrived = 100 % (docs/capacity.md)"
    )
    console.print(table)
    for caption in captions:
        console.print(caption, markup=False, highlight=False)


def print_timed(console: Console, runs: list[dict[str, object]]) -> None:
    traces = sorted({str(r["trace"]).replace("openb_pod_list_", "") for r in runs})
    columns = {
        "policy": "policy",
        "seed": "seed",
        "mean_util_pct": "util%",
        "peak_util_pct": "peak%",
        "mean_wait_s": "wait s",
        "p95_wait_s": "p95 s",
        "mean_jct_s": "JCT s",
        "never_placed": "unplaced",
        "preemptions": "preempted",
        "seconds": "s/run",
    }
    if any("sites" in r for r in runs):  # --sites: the rule that chose them, the data moved
        columns = {"sites": "sites", **columns, "gib_moved": "GiB moved"}
    if any("moves" in r for r in runs):  # --defrag: moves, their lost work, large tasks' wait
        columns |= {
            "moves": "moved",
            "lost_moves_pct_of_served": "lost%",
            "large_mean_wait_s": "4+ cards wait s",
        }
    table = FitTable(
        [
            Column(h, justify="right", spare={"p95_wait_s": 1, "peak_util_pct": 2}.get(k, 0))
            if k not in ("policy", "sites")
            else Column(h, text=True)  # a profile's name, folded only when nothing else gives
            for k, h in columns.items()
        ],
        f"timed replay of {', '.join(traces)} (utilisation over arrivals)",
    )
    for run in runs:
        cells = []
        for key in columns:
            value = run[key]
            if isinstance(value, float):
                big = abs(value) >= 100 or key in ("never_placed", "preemptions", "moves")
                cells.append(f"{value:,.0f}" if big else f"{value:.1f}")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    console.print(table)
    for run in runs:
        waits = run.get("wait_by_queue")
        if isinstance(waits, dict):
            per_queue = ", ".join(f"{q} {w:.1f} s" for q, w in waits.items())
            console.print(f"{run['policy']} seed {run['seed']}: mean wait by queue: {per_queue}")
