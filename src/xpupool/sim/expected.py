"""The authors' own results (``fgd_expected_results/``): allocation % per arrived-% bin for each
trace, policy and seed, to print beside ours. Policy labels map to engine profile names."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

PAPER_POLICIES: dict[str, str] = {
    "01-Random": "random",
    "02-DotProd": "dotprod",
    "03-GpuClustering": "gpuclustering",
    "04-GpuPacking": "gpupacking",
    "05-BestFit": "bestfit",
    "06-FGD": "fgd",
}


FILES = {
    "alloc_pct": "analysis_allo_discrete.csv",
    "frag_amount_pct": "analysis_frag_discrete.csv",
    "frag_ratio_pct": "analysis_frag_ratio_discrete.csv",
}


def load_expected(
    directory: str | Path, trace: str, series: str = "alloc_pct"
) -> dict[str, list[list[float]]]:
    """``{profile: [131 values per seed]}`` of one series for one trace (empty if not there)."""
    path = Path(directory) / FILES[series]
    out: dict[str, list[list[float]]] = defaultdict(list)
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["workload"] != trace or row["sc_policy"] not in PAPER_POLICIES:
                continue
            out[PAPER_POLICIES[row["sc_policy"]]].append(
                [float(row[str(i)]) if row.get(str(i)) else np.nan for i in range(131)]
            )
    return dict(out)


def paper_unallocated(directory: str | Path, trace: str, arrived: int = 100) -> dict[str, float]:
    """Mean unallocated % at ``arrived`` over the authors' seeds, per profile."""
    return {
        policy: float(np.mean([100.0 - run[arrived] for run in runs]))
        for policy, runs in load_expected(directory, trace).items()
    }
