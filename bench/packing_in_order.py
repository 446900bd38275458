"""How low can unallocated GPU % at arrived = 100 % go when every task that fits must be placed?

    python bench/packing_in_order.py [--trace default] [--seeds 42-51]

The simulator's packing bound (``xpupool simulate --bound``) packs the demand that arrived by 100 %
as one cutting-stock LP: it may leave any task out, so it drops the 0.81 shares whose cards would
keep 0.19 idle and fills their cards with others. A scheduler cannot: a task that fits is placed,
and once whole cards run out, the tasks that fail are whatever arrives. This estimate keeps that
rule and nothing else of the cluster (no nodes, CPU, memory; a k-card task is k whole cards):

- the longest prefix of the arrival order whose tasks pack into the fleet's GPUs (fewest cards
  of a cutting-stock integer program, HiGHS) is placed, with the future known;
- every later task (to arrived = 100 %) is placed if the tasks placed so far and it still pack
  (re-arranged freely), and fails otherwise.

It is an estimate, not a bound: re-arranging after every task helps the packer, but taking every
task that still packs may not be the best order-respecting choice. It says where the 25 % goal of
the default trace (<= 3.6 %) stands against what any placement rule can reach without moving tasks.
About a minute per seed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from policy_table import TRACES, seed_range
from xpupool.sim.alibaba import GPU_MILLI, TraceTask, capacity_milli, read_nodes, read_tasks
from xpupool.sim.fgd_protocol import tuned_workload
from xpupool.sim.packing_bound import _patterns, arrived_until


class Packer:
    """Fewest GPUs that hold a multiset of tasks, over the share sizes of one arrival sequence."""

    def __init__(self, tasks: list[TraceTask]) -> None:
        self.sizes = sorted({t.gpu_milli for t in tasks if 0 < t.gpu_milli < GPU_MILLI})
        self.index = {s: i for i, s in enumerate(self.sizes)}
        self.patterns = np.asarray(_patterns(self.sizes), np.float64).T  # [sizes, patterns]

    def fits(self, tasks: list[TraceTask], gpus: int) -> bool:
        whole = sum(t.num_gpu for t in tasks if t.gpu_milli >= GPU_MILLI)
        shares = np.zeros(len(self.sizes))
        for t in tasks:
            if 0 < t.gpu_milli < GPU_MILLI:
                shares[self.index[t.gpu_milli]] += 1
        room = gpus - whole
        if room < 0 or float(shares @ np.asarray(self.sizes)) > room * GPU_MILLI:
            return False
        if not shares.any():
            return True
        ones = np.ones(self.patterns.shape[1])
        cover = LinearConstraint(self.patterns, shares, np.inf)
        relaxed = linprog(ones, A_ub=-self.patterns, b_ub=-shares, method="highs")
        if relaxed.fun > room + 1e-6:  # even the LP needs more cards
            return False
        exact = milp(ones, constraints=cover, integrality=ones, bounds=Bounds(0, np.inf))
        return bool(exact.success) and round(exact.fun) <= room


def estimate(nodes_csv: Path, pods_csv: Path, seed: int) -> tuple[float, float]:
    """(arrived % at which the prefix stops packing, unallocated % at arrived = 100 %)."""
    nodes, tasks = read_nodes(nodes_csv), read_tasks(pods_csv)
    capacity = capacity_milli(nodes)
    gpus = capacity // GPU_MILLI
    arrived = [
        t for t in arrived_until(tuned_workload(tasks, capacity, seed), capacity) if t.num_gpu
    ]
    packer = Packer(arrived)
    low, high = 0, len(arrived)  # arrived[:low] packs
    while low < high:
        mid = (low + high + 1) // 2
        if packer.fits(arrived[:mid], gpus):
            low = mid
        else:
            high = mid - 1
    placed = arrived[:low]
    failed = 0
    for task in arrived[low:]:
        if packer.fits([*placed, task], gpus):
            placed.append(task)
        else:
            failed += task.gpu_request_milli
    full = 100.0 * sum(t.gpu_request_milli for t in arrived[:low]) / capacity
    return full, 100.0 * failed / capacity


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=TRACES)
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seeds", default="42-51")
    args = parser.parse_args()
    nodes = args.data / "openb_node_list_gpu_node.csv"
    pods = args.data / f"openb_pod_list_{args.trace}.csv"
    results = []
    for seed in seed_range(args.seeds):
        full, idle = estimate(nodes, pods, seed)
        results.append(idle)
        print(f"{args.trace} seed {seed}: packs to {full:.2f} %, unallocated {idle:.3f} %")
        sys.stdout.flush()
    sd = statistics.stdev(results) if len(results) > 1 else 0.0
    print(
        f"{args.trace}: unallocated at arrived = 100 %: {statistics.fmean(results):.3f} +- {sd:.3f}"
    )


if __name__ == "__main__":
    main()
