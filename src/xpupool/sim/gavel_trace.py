"""Gavel's traces and throughput matrix, replayed in time through the one cycle.

Gavel (Narayanan et al., OSDI 2020; ../shared/traces/gavel) gives, per job, a job type, its total
training steps, a scale factor (GPUs) and an arrival time; and, per (job type, scale factor) and
worker type (``v100``, ``p100``, ``k80``), the job's steps per second alone on those GPUs. A job's
run time is therefore ``total_steps / throughput`` of the card model it is given, which is what
makes placement by speed matter. This module reads both (the 10-field trace format Gavel's
``parse_trace`` reads and the 7-field MSR/Philly one), builds Gavel's cluster as nodes of
``gpus_per_server`` cards (Gavel registers ``count // gpus_per_server`` servers per type and drops
the rest: so do we), and hands :func:`~xpupool.sim.timed_replay.timed_replay` each job's request
(its speeds per card model; the models it does not fit on, throughput 0, left out) and its
duration on the card it got.

The matrix holds scale factors 1, 2, 4 and 8 only (and 1 alone for some types): a larger one is
mapped to the largest the job type has that is not above it (:meth:`GavelMatrix.scale_factor`),
in the trace both systems replay.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from xpupool.engine import Profile
from xpupool.engine.cycle.faster_cards import FasterRule
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Allocation, Device, Node, Request, RequestError
from xpupool.sim.alibaba import GPU_MILLI, TraceTask, to_request

WORKER_TYPES = ("v100", "p100", "k80")  # Gavel's cluster spec order: #v100:#p100:#k80
CARD_MODEL = {"v100": "V100", "p100": "P100", "k80": "K80"}
_CARD_GIB = {"v100": 16, "p100": 16, "k80": 12}
_NODE_CPU_MILLI = 64_000
_NODE_MEMORY_MIB = 512 * 1024


@dataclass(frozen=True, slots=True)
class GavelJob:
    job_type: str
    total_steps: int
    scale_factor: int
    arrival_s: float


class GavelMatrix:
    """Isolated throughputs (steps/s) per (job type, scale factor) and worker type, from Gavel's
    ``simulation_throughputs.json`` (consolidated placements: all GPUs of a job on one server)."""

    def __init__(self, table: dict[tuple[str, int], dict[str, float]]) -> None:
        self._table = table
        self._scales: dict[str, tuple[int, ...]] = {}
        for job_type, sf in table:
            self._scales[job_type] = tuple(sorted({*self._scales.get(job_type, ()), sf}))

    @classmethod
    def load(cls, path: str | Path) -> GavelMatrix:
        raw = json.loads(Path(path).read_text())
        table: dict[tuple[str, int], dict[str, float]] = {}
        for worker in WORKER_TYPES:
            if worker not in raw:
                raise RequestError(f"{Path(path).name}.{worker}", None, "worker type missing")
            for key, entry in raw[worker].items():
                job_type, sf = ast.literal_eval(key)
                table.setdefault((str(job_type), int(sf)), {})[worker] = float(entry["null"])
        return cls(table)

    def job_types(self) -> list[str]:
        return sorted(self._scales)

    def scale_factor(self, job_type: str, requested: int) -> int:
        """The largest scale factor of ``job_type`` in the matrix that is <= ``requested``."""
        scales = self._scales.get(job_type)
        if not scales:
            raise RequestError("job_type", job_type, "not in the throughput matrix")
        return max((s for s in scales if s <= requested), default=scales[0])

    def steps_per_s(self, job_type: str, scale_factor: int) -> dict[str, float]:
        """Worker type -> steps/s (0: the job does not fit on that type)."""
        return dict(self._table[(job_type, scale_factor)])


def read_trace(path: str | Path) -> list[GavelJob]:
    """A Gavel trace, 10 tab-separated fields (Gavel's ``parse_trace``) or 7 (the MSR traces)."""
    jobs: list[GavelJob] = []
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        parts = line.split("\t")
        where = f"{Path(path).name}[{i}]"
        try:
            if len(parts) == 10:
                job = GavelJob(parts[0], int(parts[5]), int(parts[6]), float(parts[9]))
            elif len(parts) == 7:
                job = GavelJob(parts[0], int(parts[4]), int(parts[6]), float(parts[5]))
            else:
                raise RequestError(where, len(parts), "expected 7 or 10 tab-separated fields")
        except ValueError as exc:
            raise RequestError(where, line[:80], f"not a Gavel trace line: {exc}") from None
        if job.scale_factor < 1 or job.total_steps < 0 or not math.isfinite(job.arrival_s):
            raise RequestError(where, line[:80], "scale factor >= 1, steps >= 0, finite arrival")
        jobs.append(job)
    return jobs


def cluster(spec: str = "300:300:300", gpus_per_server: int = 8) -> list[Node]:
    """Gavel's cluster ``#v100:#p100:#k80`` as nodes of ``gpus_per_server`` cards, named
    ``<type>-<i>`` (Gavel's simulator keeps ``count // gpus_per_server`` servers per type)."""
    counts = spec.split(":")
    if len(counts) != 3 or not all(c.isdigit() for c in counts):
        raise RequestError("cluster_spec", spec, "expected #v100:#p100:#k80 such as 300:300:300")
    if gpus_per_server < 1:
        raise RequestError("gpus_per_server", gpus_per_server, "must be >= 1")
    nodes: list[Node] = []
    for worker, count in zip(WORKER_TYPES, counts, strict=True):
        for i in range(int(count) // gpus_per_server):
            name = f"{worker}-{i}"
            devices = tuple(
                Device(
                    f"{name}-gpu{j}",
                    "nvidia",
                    CARD_MODEL[worker],
                    _CARD_GIB[worker] * 1024,
                    index=j,
                )
                for j in range(gpus_per_server)
            )
            nodes.append(Node(name, _NODE_CPU_MILLI, _NODE_MEMORY_MIB, devices))
    return nodes


class GavelWorkload:
    """The jobs of a trace as the timed replay sees them (``timed_replay(..., speeds=)``): one
    task per job, its request carrying its speeds, its duration set by the card it gets."""

    def __init__(self, jobs: Sequence[GavelJob], matrix: GavelMatrix) -> None:
        self.jobs = list(jobs)
        self.scale = [matrix.scale_factor(j.job_type, j.scale_factor) for j in self.jobs]
        self.rates = [
            matrix.steps_per_s(j.job_type, sf) for j, sf in zip(jobs, self.scale, strict=True)
        ]
        self.tasks = [self._task(i) for i in range(len(self.jobs))]

    def _task(self, i: int) -> TraceTask:
        job, rates = self.jobs[i], self.rates[i]
        fits = tuple(CARD_MODEL[w] for w in WORKER_TYPES if rates.get(w, 0.0) > 0.0)
        arrival = int(job.arrival_s)
        return TraceTask(
            name=f"job-{i}",
            cpu_milli=0,
            memory_mib=0,
            num_gpu=self.scale[i],
            gpu_milli=GPU_MILLI,
            gpu_spec=fits,
            creation_time=arrival,
            deletion_time=arrival + self.reference_s(i),
        )

    def reference_s(self, i: int) -> int:
        """The job's run time on its fastest card type, seconds (at least 1)."""
        best = max(self.rates[i].values())
        return max(1, math.ceil(self.jobs[i].total_steps / best)) if best > 0 else 1

    def request(self, index: int, task: TraceTask) -> Request:
        speeds = tuple((CARD_MODEL[w], r) for w, r in self.rates[index].items() if r > 0.0)
        kind = self.jobs[index].job_type.replace(" ", "_")
        return replace(to_request(task), speeds=speeds, kind=kind)

    def duration_s(self, index: int, allocations: Sequence[Allocation]) -> int:
        """Run time on the card type the job was given (its slowest, were they mixed)."""
        workers = {a.node.split("-", 1)[0] for a in allocations}
        rate = min(self.rates[index][w] for w in workers)
        return max(1, math.ceil(self.jobs[index].total_steps / rate))


def run_timed(
    trace_path: str,
    throughputs_path: str,
    policy: Profile | str,
    seed: int,
    cluster_spec: str = "300:300:300",
    gpus_per_server: int = 8,
    compress: float = 1.0,
    faster: FasterRule | None = None,
    checkpoints: bool = False,
) -> dict[str, object]:
    """One timed replay of a Gavel trace (``xpupool simulate --mode timed --throughputs``): the
    run's summary, as ``sim.runner.run_timed`` gives it for an Alibaba trace. ``faster``: moves
    to faster cards by that rule (``engine/cycle/faster_cards.py``; None: off); ``checkpoints``:
    jobs checkpoint as the seeded model draws (``sim/checkpoints.py``), so a move loses less."""
    from xpupool.sim.checkpoints import CheckpointModel
    from xpupool.sim.timed_replay import QueueOrder, timed_replay

    work = GavelWorkload(read_trace(trace_path), GavelMatrix.load(throughputs_path))
    workload = TargetWorkload.from_requests(work.request(i, t) for i, t in enumerate(work.tasks))
    nodes = cluster(cluster_spec, gpus_per_server)
    result = timed_replay(
        nodes,
        work.tasks,
        policy,
        seed,
        workload,
        QueueOrder.FIFO,
        compress,
        speeds=work,
        checkpoints=CheckpointModel(seed) if checkpoints else None,
        faster=faster,
    )
    name = policy if isinstance(policy, str) else policy.name
    return {"trace": Path(trace_path).stem, "policy": name, "seed": seed, **result.summary()}


def fixed_tasks(
    jobs: Sequence[GavelJob], matrix: GavelMatrix, worker: str = "v100"
) -> list[TraceTask]:
    """The jobs as fixed whole-card tasks of a cluster of ``worker`` cards only (Gavel's
    homogeneous Philly cluster, ``msr/cluster_specs.json``, is 500 V100): each asks its mapped
    scale factor of cards on one node and runs ``total_steps`` at its isolated throughput there.
    A job that does not fit on ``worker`` (throughput 0) is left out. The Philly traces carry many
    jobs of 2 to 8 cards, which the Alibaba default trace lacks (most of its tasks ask one card or
    a share of one); the governance benchmark replays them too (``bench/governance.py
    --philly``)."""
    if worker not in WORKER_TYPES:
        raise RequestError("worker", worker, f"expected one of {', '.join(WORKER_TYPES)}")
    tasks: list[TraceTask] = []
    for i, job in enumerate(jobs):
        sf = matrix.scale_factor(job.job_type, job.scale_factor)
        rate = matrix.steps_per_s(job.job_type, sf).get(worker, 0.0)
        if rate <= 0.0:
            continue
        arrival = int(job.arrival_s)
        tasks.append(
            TraceTask(
                name=f"job-{i}",
                cpu_milli=0,
                memory_mib=0,
                num_gpu=sf,
                gpu_milli=GPU_MILLI,
                gpu_spec=(CARD_MODEL[worker],),
                creation_time=arrival,
                deletion_time=arrival + max(1, math.ceil(job.total_steps / rate)),
            )
        )
    return tasks
