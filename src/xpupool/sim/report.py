"""Run the simulations a command asks for, with progress while running (``sim/progress.py``), and
write the HTML report with the paper's figures (unallocated GPU vs arrived workload, fragmentation
ratio vs arrived, unallocated at 100 % per trace and policy), our runs drawn beside the authors'.
The terminal tables of the results are the command line's (``client/sim_tables.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from xpupool.engine import Profile
from xpupool.sim.progress import progress_for
from xpupool.sim.queue_config import QueueConfig
from xpupool.sim.runner import (
    RunSpec,
    TimedOptions,
    lower_bound,
    run_all,
    run_timed,
    spec_labels,
    summarise,
    trace_name,
)
from xpupool.sim.site_dispatch import RULES, SimSites


def run_traces(
    nodes_path: str,
    pods_paths: list[str],
    policies: Sequence[Profile | str],
    seeds: list[int],
    tune: float,
    jobs: int,
    expected_dir: str | None,
    console: Console,
    bound: bool = False,
) -> list[dict[str, object]]:
    """Run every (trace, policy, seed) and return one result dict per trace; with ``bound``, also
    the packing lower bound on unallocated % that no policy can beat."""
    specs = [
        RunSpec(nodes_path, pods, policy, seed, tune)
        for pods in pods_paths
        for policy in policies
        for seed in seeds
    ]
    with progress_for(console, spec_labels(specs)) as progress:
        runs = run_all(specs, jobs, progress)
    results: list[dict[str, object]] = []
    per_trace = len(policies) * len(seeds)
    for i, pods in enumerate(pods_paths):
        trace = trace_name(pods)
        expected = expected_dir or str(Path(pods).parent / "fgd_expected_results")
        trace_runs = runs[i * per_trace : (i + 1) * per_trace]
        results.append(
            {
                "trace": trace,
                "expected_dir": expected,
                "runs": trace_runs,
                "summary": summarise(trace_runs, trace, expected),
            }
        )
        if bound:
            results[-1]["lower_bound_pct"] = lower_bound(nodes_path, pods, seeds, tune)
    return results


def write_report(directory: Path, results: list[dict[str, object]]) -> Path:
    """Write PNG plots and ``index.html`` into ``directory``; returns the page's path."""
    from xpupool.sim.plots import write_plots

    directory.mkdir(parents=True, exist_ok=True)
    sections = write_plots(directory, results)
    rows = []
    for result in results:
        summary: dict[str, dict[str, float | None]] = result["summary"]  # type: ignore[assignment]
        for policy, f in summary.items():
            paper = "-" if f["paper_mean"] is None else f"{f['paper_mean']:.2f}"
            rows.append(
                f"<tr><td>{result['trace']}</td><td>{policy}</td>"
                f"<td>{f['mean']:.2f} ± {f['sd']:.2f}</td><td>{paper}</td></tr>"
            )
    figures = "\n".join(
        f'<h2>{title}</h2><img src="{name}" width="720">' for title, name in sections
    )
    page = directory / "index.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><title>xpupool simulation</title>"
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}"
        "td,th{padding:2px 10px;text-align:right}td:first-child,td:nth-child(2){text-align:left}</style>"
        "<h1>xpupool simulation report</h1>"
        "<p>Unallocated GPU % at arrived workload = 100 % (mean ± sd over seeds), beside the "
        "authors' published results where they exist.</p>"
        "<table><tr><th>trace</th><th>policy</th><th>xpupool</th><th>paper</th></tr>"
        + "".join(rows)
        + "</table>"
        + figures
    )
    return page


def run_timed_traces(
    nodes_path: str,
    pods_paths: list[str],
    policies: Sequence[Profile | str],
    seeds: list[int],
    queue: str,
    compress: float,
    queues: QueueConfig | None = None,
    console: Console | None = None,
    sites: SimSites | None = None,
    options: TimedOptions | None = None,
) -> list[dict[str, object]]:
    """Timed replays, one per (trace, policy, seed), serially (each is one pass over a trace);
    with ``console``, progress as each run starts and finishes. With ``sites``, each run once per
    site rule (``site_dispatch.RULES``), so the rules are compared in the same command."""
    specs = [
        RunSpec(nodes_path, pods, p, s) for pods in pods_paths for p in policies for s in seeds
    ]
    rules = RULES if sites is not None else ("",)
    runs: list[dict[str, object]] = []
    with progress_for(console or Console(quiet=True), spec_labels(specs)) as progress:
        for i, spec in enumerate(specs):
            progress.started(i)
            for rule in rules:
                timed = run_timed(spec, queue, compress, queues, sites, rule, options)
                runs.append({"trace": trace_name(spec.pods_path), **timed})
            progress.finished(i, runs[-1])
    return runs
