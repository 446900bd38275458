"""PNG figures for the simulation report, drawn with matplotlib (Agg, no display needed).

Our curves are the mean over seeds (solid); the authors' published means are dashed in the same
colour, so a reader sees at once where a reproduction matches and where it does not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xpupool.sim.expected import load_expected


def _mean_curve(runs: list[dict[str, object]], policy: str, key: str) -> np.ndarray:
    rows: list[list[float | None]] = [r[key] for r in runs if r["policy"] == policy]  # type: ignore[misc]
    data = np.asarray([[np.nan if v is None else v for v in row] for row in rows], np.float64)
    return np.nanmean(data, axis=0) if data.size else np.full(131, np.nan)


def write_plots(directory: Path, results: list[dict[str, object]]) -> list[tuple[str, str]]:
    """Write the figures; returns (title, file name) pairs in page order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections: list[tuple[str, str]] = []
    x = np.arange(131)
    for result in results:
        trace = str(result["trace"])
        runs: list[dict[str, object]] = result["runs"]  # type: ignore[assignment]
        policies = list(dict.fromkeys(str(r["policy"]) for r in runs))
        expected_dir = str(result["expected_dir"])
        for key, label, title, fname in (
            (
                "alloc_pct",
                "unallocated GPU %",
                "Unallocated GPU vs arrived workload (paper Fig. 9a)",
                f"{trace}-unallocated.png",
            ),
            (
                "frag_ratio_pct",
                "fragmentation ratio %",
                "Fragmentation ratio vs arrived workload (paper Fig. 7)",
                f"{trace}-frag-ratio.png",
            ),
        ):
            paper = load_expected(expected_dir, trace, key)
            fig, ax = plt.subplots(figsize=(8, 4.5))
            for i, policy in enumerate(policies):
                colour = f"C{i}"
                ours = _mean_curve(runs, policy, key)
                ax.plot(x, 100 - ours if key == "alloc_pct" else ours, color=colour, label=policy)
                if policy in paper:
                    theirs = np.nanmean(np.asarray(paper[policy]), axis=0)
                    ax.plot(
                        x,
                        100 - theirs if key == "alloc_pct" else theirs,
                        color=colour,
                        linestyle="--",
                        linewidth=1,
                        label=f"{policy} (paper)",
                    )
            ax.set_xlabel("arrived workload, % of GPU capacity")
            ax.set_ylabel(label)
            if key == "alloc_pct":
                ax.set_xlim(80, 130)
                ax.set_ylim(0, 30)
            ax.set_title(f"{trace}: {title}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            fig.savefig(directory / fname, dpi=110)
            plt.close(fig)
            sections.append((f"{trace}: {title}", fname))
    if len(results) > 1:
        sections.append(_bars(plt, directory, results))
    return sections


def _bars(plt: object, directory: Path, results: list[dict[str, object]]) -> tuple[str, str]:
    """Unallocated % at 100 % per trace and policy, paper means as black ticks (Figs. 11-14)."""
    traces = [str(r["trace"]) for r in results]
    summaries: list[dict[str, dict[str, float | None]]] = [r["summary"] for r in results]  # type: ignore[misc]
    policies = list(dict.fromkeys(p for s in summaries for p in s))
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(traces)), 4.5))  # type: ignore[attr-defined]
    for i, policy in enumerate(policies):
        xs = np.arange(len(traces)) + i * width
        ours = [s.get(policy, {}).get("mean") or np.nan for s in summaries]
        sds = [s.get(policy, {}).get("sd") or 0.0 for s in summaries]
        ax.bar(xs, ours, width, yerr=sds, color=f"C{i}", label=policy)
        paper = [s.get(policy, {}).get("paper_mean") for s in summaries]
        ax.scatter(
            xs,
            [np.nan if p is None else p for p in paper],
            marker="_",
            color="black",
            s=80,
            label="paper" if i == 0 else None,
            zorder=3,
        )
    ax.set_xticks(np.arange(len(traces)) + 0.4 - width / 2)
    ax.set_xticklabels([t.replace("openb_pod_list_", "") for t in traces], rotation=30)
    ax.set_ylabel("unallocated GPU % at arrived = 100 %")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(directory / "unallocated-by-trace.png", dpi=110)
    plt.close(fig)  # type: ignore[attr-defined]
    return (
        "Unallocated GPU % at arrived = 100 % per trace and policy (paper Figs. 11-14)",
        "unallocated-by-trace.png",
    )
