"""Heterogeneity side by side with Gavel: the same jobs, Gavel's simulator and xpupool's timed replay.

One MSR virtual-cluster trace (``--vc``, its first ``--jobs`` jobs) from
../shared/traces/gavel/msr/seed=0 is re-timed to each input rate (jobs/hour; the gaps between
arrivals keep their proportions), scale factors are mapped into the throughput matrix (the largest
the job type has that is not above the trace's: 12..64 -> 8, 7 -> 4; Recommendation, A3C and
CycleGAN -> 1), and the mapped trace is replayed by

* Gavel (``--gavel PATH``, a checkout outside the repository; its ``scheduler/`` is imported in a
  child process run by ``--gavel-python``): LAS heterogeneity-agnostic ``max_min_fairness`` and
  heterogeneity-aware ``max_min_fairness_perf``, rounds of 360 s, ECOS;
* xpupool (``xpupool.sim.gavel_trace`` through the one cycle): the default policy ``xpupool`` and
  ``throughput``, and ``throughput`` with moves to faster cards (``throughput+faster``,
  ``engine/cycle/faster_cards.py``: a running job moves to free faster cards when its remaining
  run ends ``--faster-speedup`` times and ``--faster-gain-min`` minutes sooner there, the work
  since its last checkpoint redone and ``--faster-restart-s`` paid). xpupool's jobs checkpoint
  every ``--checkpoint-min`` minutes (only a move loses work; 0: never, a move redoes the run).

Both on 300 V100 + 300 P100 + 300 K80 in servers of 8 cards (Gavel keeps 37 servers per type, 296
cards; so does xpupool's cluster). Per rate and policy: mean JCT of the jobs in ``--window``
(indices in arrival order, as Gavel's ``-s/-e``), makespan (first arrival to the last window job's
end), utilisation (card time busy / card time up to the makespan: Gavel's own figure, xpupool's
from its allocation curve) and the replay's wall time per job (Gavel: its simulation, rounds and
solver included; xpupool: the replay, retries included); and, for xpupool's policies, the time of
one placement decision at 888 cards (``decision``: mean and p99 ms); with moves, the moves made
and the GPU-hours they lost. Prints JSON. Never run in CI: the Gavel side needs cvxpy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from xpupool.engine.cycle.faster_cards import FasterRule
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.sim import gavel_trace
from xpupool.sim.checkpoints import CheckpointModel
from xpupool.sim.timed_replay import timed_replay

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "traces" / "gavel"
GAVEL_POLICIES = ("max_min_fairness", "max_min_fairness_perf")
XPUPOOL_POLICIES = ("xpupool", "throughput")
FASTER = "throughput+faster"  # the throughput policy with moves to faster cards
GPUS_PER_SERVER = 8
CLUSTER = "300:300:300"

# Run inside Gavel's environment: Gavel's simulator on one trace, figures to a JSON file.
_GAVEL_DRIVER = r"""
import contextlib, io, json, logging, os, sys, time
sched_dir, trace, policy_name, thr, spec, per_server, first, last, out = sys.argv[1:10]
sys.path.insert(0, sched_dir)
os.chdir(sched_dir)
logging.disable(logging.CRITICAL)
import scheduler, utils
from job_id_pair import JobIdPair
jobs, arrivals = utils.parse_trace(trace)
policy = utils.get_policy(policy_name, solver="ECOS", seed=0)
types = ("v100", "p100", "k80")
window = {JobIdPair(i, None) for i in range(int(first), int(last))}
with contextlib.redirect_stdout(io.StringIO()):
    s = scheduler.Scheduler(policy, throughputs_file=thr, simulate=True, seed=0,
                            time_per_iteration=360)
    start = time.perf_counter()
    s.simulate(dict(zip(types, map(int, spec.split(":")))), arrivals, jobs,
               num_gpus_per_server=dict(zip(types, [int(per_server)] * 3)),
               jobs_to_complete=window)
    wall = time.perf_counter() - start
    util = s.get_cluster_utilization()
jct = {}
for job_id, done in s._job_completion_times.items():
    if done is not None:
        jct[job_id[0]] = done
json.dump({"wall_s": wall, "jct_s": jct, "utilisation": util}, open(out, "w"))
"""


def mapped_trace(vc: str, jobs: int, rate_per_h: float, data: Path) -> list[gavel_trace.GavelJob]:
    """The first ``jobs`` jobs of ``vc`` re-timed to ``rate_per_h`` arrivals per hour on average,
    scale factors mapped into the matrix."""
    matrix = gavel_trace.GavelMatrix.load(data / "simulation_throughputs.json")
    rows = gavel_trace.read_trace(data / "msr" / "seed=0" / f"{vc}.trace")[:jobs]
    t0 = rows[0].arrival_s
    span = max(rows[-1].arrival_s - t0, 1.0)
    factor = (len(rows) / rate_per_h * 3600.0) / span
    return [
        gavel_trace.GavelJob(
            r.job_type,
            r.total_steps,
            matrix.scale_factor(r.job_type, r.scale_factor),
            round((r.arrival_s - t0) * factor),
        )
        for r in rows
    ]


def write_gavel_trace(jobs: list[gavel_trace.GavelJob], path: Path) -> None:
    """Gavel's 10-field format (``utils.parse_trace``); the command fields are placeholders."""
    with path.open("w") as f:
        for j in jobs:
            fields = [j.job_type, "-", ".", "-", "0", str(j.total_steps), str(j.scale_factor)]
            f.write("\t".join([*fields, "1", "-1", f"{j.arrival_s:.1f}"]) + "\n")


def window_figures(
    arrival_s: np.ndarray, jct_s: np.ndarray, window: tuple[int, int]
) -> dict[str, float]:
    a, b = window
    jct = jct_s[a:b]
    done = ~np.isnan(jct)
    ends = arrival_s[a:b][done] + jct[done]
    return {
        "avg_jct_h": round(float(jct[done].mean()) / 3600, 3) if done.any() else float("nan"),
        "makespan_h": round(float(ends.max() - arrival_s[0]) / 3600, 3) if done.any() else 0.0,
        "window_done": int(done.sum()),
    }


def run_xpupool(
    jobs: list[gavel_trace.GavelJob],
    policy: str,
    window: tuple[int, int],
    data: Path,
    faster: FasterRule | None = None,
    checkpoints: CheckpointModel | None = None,
) -> dict[str, float]:
    matrix = gavel_trace.GavelMatrix.load(data / "simulation_throughputs.json")
    work = gavel_trace.GavelWorkload(jobs, matrix)
    nodes = gavel_trace.cluster(CLUSTER, GPUS_PER_SERVER)
    workload = TargetWorkload.from_requests(work.request(i, t) for i, t in enumerate(work.tasks))
    kernels.warm()
    result = timed_replay(
        nodes,
        work.tasks,
        policy,
        0,
        workload,
        speeds=work,
        checkpoints=checkpoints,
        faster=faster,
    )
    arrivals = np.asarray([t.creation_time for t in work.tasks], np.float64)
    out = window_figures(arrivals, result.jct_s, window)
    out["utilisation"] = round(_busy_share(result.times, result.util_pct, out["makespan_h"]), 3)
    out["replay_ms_per_job"] = round(1000 * result.seconds / len(jobs), 4)
    if result.faster_moves is not None:
        out["moves"] = result.faster_moves
        out["gpu_hours_lost_moves"] = round(result.gpu_hours_lost_faster, 3)
    return out


def _busy_share(times: np.ndarray, util_pct: np.ndarray, makespan_h: float) -> float:
    """Mean of the allocation curve (a step function) over [0, makespan]."""
    end = makespan_h * 3600
    if end <= 0 or times.size == 0:
        return 0.0
    starts = np.minimum(times, end)
    stops = np.minimum(np.append(times[1:], end), end)
    return float((util_pct * np.clip(stops - starts, 0, None)).sum() / end / 100)


def decision_ms(jobs: list[gavel_trace.GavelJob], policy: str, data: Path) -> dict[str, float]:
    """Time of one placement decision at 888 cards: the jobs' requests placed one after another
    on an engine of Gavel's cluster (no departures) until one does not fit, each call timed;
    mean and p99 in ms. What one decision costs, apart from how often a replay retries."""
    from xpupool.engine import ClusterState, Engine

    matrix = gavel_trace.GavelMatrix.load(data / "simulation_throughputs.json")
    work = gavel_trace.GavelWorkload(jobs, matrix)
    requests = [work.request(i, t) for i, t in enumerate(work.tasks)]
    workload = TargetWorkload.from_requests(requests)
    nodes = gavel_trace.cluster(CLUSTER, GPUS_PER_SERVER)
    engine = Engine(ClusterState(nodes, seed=0), policy, seed=0, workload=workload)
    kernels.warm()
    engine.place(requests[0])  # first-call set-up is not a decision's cost
    took: list[float] = []
    for req in requests[1:]:
        start = time.perf_counter()
        placed = engine.place(req).ok
        took.append(time.perf_counter() - start)
        if not placed:
            break
    ms = 1000 * np.asarray(took)
    return {
        "decisions": len(took),
        "mean_ms": round(float(ms.mean()), 4),
        "p99_ms": round(float(np.percentile(ms, 99)), 4),
    }


def run_gavel(
    jobs: list[gavel_trace.GavelJob],
    policy: str,
    window: tuple[int, int],
    gavel: Path,
    python: str,
    data: Path,
    scratch: Path,
) -> dict[str, float]:
    trace = scratch / "trace.tsv"
    out = scratch / "gavel.json"
    write_gavel_trace(jobs, trace)
    args = [str(gavel / "scheduler"), str(trace), policy, str(data / "simulation_throughputs.json")]
    args += [CLUSTER, str(GPUS_PER_SERVER), str(window[0]), str(window[1]), str(out)]
    subprocess.run(
        [python, "-c", _GAVEL_DRIVER, *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    got = json.loads(out.read_text())
    arrivals = np.asarray([j.arrival_s for j in jobs], np.float64)
    jct = np.full(len(jobs), np.nan)
    for key, value in got["jct_s"].items():
        jct[int(key)] = value
    figures = window_figures(arrivals, jct, window)
    figures["utilisation"] = round(float(got["utilisation"] or 0.0), 3)
    figures["replay_ms_per_job"] = round(1000 * got["wall_s"] / len(jobs), 4)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gavel", type=Path, help="Gavel checkout (skip Gavel without it)")
    parser.add_argument("--gavel-python", default=sys.executable)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--vc", default="11cb48")
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--window", default="100:500", help="FIRST:LAST job indices measured")
    parser.add_argument("--rates", default="low=4,medium=8,high=12", help="NAME=jobs per hour, ...")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output)")
    parser.add_argument("--faster-speedup", type=float, default=1.5, help="a move's least speedup")
    parser.add_argument("--faster-gain-min", type=float, default=30.0, help="a move's least gain")
    parser.add_argument("--faster-restart-s", type=float, default=60.0, help="a move's restart")
    parser.add_argument(
        "--checkpoint-min", type=float, default=30.0, help="xpupool's jobs checkpoint so often"
    )
    args = parser.parse_args()
    faster = FasterRule(args.faster_speedup, args.faster_gain_min * 60, args.faster_restart_s)
    every = args.checkpoint_min
    checkpoints = CheckpointModel(0, 0.0, every, every) if every > 0 else None
    first, last = (int(x) for x in args.window.split(":"))
    rates = {k: float(v) for k, v in (p.split("=") for p in args.rates.split(","))}
    started = time.perf_counter()
    report: dict[str, object] = {
        "vc": args.vc,
        "jobs": args.jobs,
        "window": [first, last],
        "cluster": f"{CLUSTER} in servers of {GPUS_PER_SERVER} (296 cards per type)",
        "rates_per_h": rates,
        "faster": {
            "min_speedup": faster.min_speedup,
            "min_gain_s": faster.min_gain_s,
            "restart_s": faster.restart_s,
            "checkpoint_min": every,
        },
        "runs": {},
    }
    runs: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, rate in rates.items():
            jobs = mapped_trace(args.vc, args.jobs, rate, args.data)
            per: dict[str, dict[str, float]] = {}
            for policy in XPUPOOL_POLICIES:
                per[f"xpupool:{policy}"] = run_xpupool(
                    jobs, policy, (first, last), args.data, checkpoints=checkpoints
                )
            per[f"xpupool:{FASTER}"] = run_xpupool(
                jobs, "throughput", (first, last), args.data, faster, checkpoints
            )
            if args.gavel is not None:
                for policy in GAVEL_POLICIES:
                    per[f"gavel:{policy}"] = run_gavel(
                        jobs,
                        policy,
                        (first, last),
                        args.gavel,
                        args.gavel_python,
                        args.data,
                        Path(tmp),
                    )
            runs[name] = per
            print(json.dumps({name: per}), file=sys.stderr)
    report["runs"] = runs
    jobs = mapped_trace(args.vc, args.jobs, max(rates.values()), args.data)
    report["decision"] = {p: decision_ms(jobs, p, args.data) for p in XPUPOOL_POLICIES}
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1 if not args.json else None))


if __name__ == "__main__":
    main()
