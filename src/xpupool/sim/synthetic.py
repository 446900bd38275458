"""Synthetic workloads in the Alibaba trace's format: held-out traces for placement policies.

Why: the default policy must not be tuned to the twenty trace files in ``../shared``, and it will
be measured on traces that are not there. These mixes are built differently from Alibaba's: other
share sizes, other proportions of shared, whole, multi-card, model-constrained and CPU-only tasks,
other CPU per GPU. So what the policy learns from a workload is checked on workloads it never saw.
``bench/heldout.py`` replays them under the FGD protocol.

A mix says what share of GPU tasks are fractional (and which fractions), what share ask several whole
cards (and how many), what share of all tasks take no GPU, what share of GPU tasks name a model, and
how much CPU a task asks per GPU relative to the fleet's. Each task's CPU is that ratio times its GPU
demand, spread log-normally and rounded to the request sizes people write (1, 2, 4, 6, 8, 12 ...
cores); memory is 1, 2 or 4 GiB per core. A task never asks more CPU or cards than some node of the
fleet has, so every task could run on an empty fleet.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xpupool.model import Node, RequestError
from xpupool.sim.alibaba import GPU_MILLI, TraceTask

CORES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # request sizes people write, cores
GIB_PER_CORE = (1, 2, 4)
SPREAD = 0.5  # sigma of the log-normal spread of a task's CPU around its mix's ratio


@dataclass(frozen=True, slots=True)
class Mix:
    """What a synthetic workload is made of (see the module docstring)."""

    name: str
    shares: tuple[tuple[int, float], ...]  # (thousandths of one GPU, weight) of fractional tasks
    shared: float  # share of GPU tasks that are fractional
    multi: tuple[tuple[int, float], ...]  # (cards, weight) of multi-card tasks
    multi_card: float  # share of GPU tasks that ask several whole cards
    cpu_only: float  # share of all tasks that ask no GPU
    typed: float  # share of GPU tasks that name one GPU model
    cpu_per_gpu: float  # CPU per GPU asked, as a share of the fleet's CPU per GPU

    def __post_init__(self) -> None:
        for field in ("shared", "multi_card", "cpu_only", "typed"):
            value = getattr(self, field)
            if not 0.0 <= value <= 1.0:
                raise RequestError(f"mix.{field}", value, "must be a share in 0..1")
        if self.shared + self.multi_card > 1.0:
            raise RequestError("mix.shared", self.shared, "shared + multi_card must be <= 1")
        if self.shared and not self.shares:
            raise RequestError("mix.shares", self.shares, "fractional tasks need share sizes")
        if any(not 0 < milli < GPU_MILLI for milli, _ in self.shares):
            raise RequestError("mix.shares", self.shares, "share sizes must be in 1..999")
        if self.multi_card and not self.multi:
            raise RequestError("mix.multi", self.multi, "multi-card tasks need card counts")
        if any(count < 2 for count, _ in self.multi):
            raise RequestError("mix.multi", self.multi, "multi-card tasks ask 2 or more cards")
        if self.cpu_per_gpu <= 0:
            raise RequestError("mix.cpu_per_gpu", self.cpu_per_gpu, "must be positive")


# Fixed when the held-out bench was written, before any policy was measured on them; never tuned.
DESIGNED: tuple[Mix, ...] = (
    Mix(
        "eighths",  # MIG-like slices: 1/8 .. 7/8 of a card
        tuple((125 * k, 1.0) for k in range(1, 8)),
        0.6,
        ((2, 0.5), (4, 0.3), (8, 0.2)),
        0.1,
        0.1,
        0.0,
        0.5,
    ),
    Mix(
        "tenths",  # mostly shared, small shares commoner
        tuple((100 * k, 10.0 - k) for k in range(1, 10)),
        0.8,
        ((2, 0.6), (4, 0.4)),
        0.05,
        0.05,
        0.0,
        0.4,
    ),
    Mix(
        "multicard",  # training-heavy: half the GPU tasks ask 2, 4 or 8 cards
        ((250, 1.0), (500, 1.0)),
        0.1,
        ((2, 0.4), (4, 0.3), (8, 0.3)),
        0.5,
        0.1,
        0.0,
        0.5,
    ),
    Mix(
        "typed",  # 40 % of GPU tasks name a model, every model equally often
        ((200, 1.0), (300, 1.0), (500, 2.0), (700, 1.0)),
        0.4,
        ((2, 0.5), (4, 0.3), (8, 0.2)),
        0.1,
        0.1,
        0.4,
        0.5,
    ),
    Mix(
        "cpuheavy",  # CPU runs out about when the GPUs do
        ((250, 1.0), (500, 1.0), (750, 1.0)),
        0.4,
        ((2, 0.5), (4, 0.5)),
        0.1,
        0.1,
        0.0,
        1.1,
    ),
)


# A held-out fleet unlike Alibaba's: (model, cards, cores, memory GiB, nodes). Newer cards, more CPU
# per node, fewer small nodes; fixed before any policy was run on it.
MODERN_FLEET: tuple[tuple[str, int, int, int, int], ...] = (
    ("H100", 8, 192, 2048, 200),
    ("A100", 8, 128, 1024, 150),
    ("L40S", 4, 64, 512, 200),
    ("T4", 2, 32, 192, 300),
    ("A10", 1, 16, 64, 100),
)


def write_fleet(fleet: Sequence[tuple[str, int, int, int, int]], path: str | Path) -> None:
    """An ``openb_node_list_*.csv`` of ``fleet`` (read back by ``alibaba.read_nodes``)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("sn", "cpu_milli", "memory_mib", "gpu", "model"))
        i = 0
        for model, cards, cores, gib, count in fleet:
            for _ in range(count):
                writer.writerow((f"node-{i:05d}", cores * 1000, gib * 1024, cards, model))
                i += 1


def random_mix(name: str, rng: np.random.Generator) -> Mix:
    """A mix drawn at random: 2..10 share sizes anywhere in 0.05..0.95, any proportions."""
    sizes = np.unique(rng.integers(5, 96, size=int(rng.integers(2, 11))) * 10)
    weights = rng.dirichlet(np.ones(sizes.size))
    counts = (2, 4, 8)
    multi_weights = rng.dirichlet(np.ones(len(counts)))
    return Mix(
        name,
        tuple((int(s), float(w)) for s, w in zip(sizes, weights, strict=True)),
        float(rng.uniform(0.1, 0.8)),
        tuple((c, float(w)) for c, w in zip(counts, multi_weights, strict=True)),
        float(rng.uniform(0.0, 0.2)),
        float(rng.uniform(0.0, 0.2)),
        float(rng.uniform(0.0, 0.3)),
        float(rng.uniform(0.3, 1.2)),
    )


def held_out(random_mixes: int = 10, seed: int = 2026) -> list[Mix]:
    """The held-out set: the designed mixes and ``random_mixes`` random ones from ``seed``."""
    rng = np.random.default_rng(seed)
    return list(DESIGNED) + [random_mix(f"random{i + 1}", rng) for i in range(random_mixes)]


def generate(mix: Mix, nodes: Sequence[Node], tasks: int, seed: int) -> list[TraceTask]:
    """``tasks`` tasks of ``mix`` for the fleet ``nodes`` (seeded), all at time 0."""
    rng = np.random.default_rng(seed)
    gpu_nodes = [n for n in nodes if n.devices]
    if not gpu_nodes:
        raise RequestError("nodes", len(nodes), "the fleet has no GPU node")
    per_gpu = sum(n.cpu_milli for n in gpu_nodes) / sum(len(n.devices) for n in gpu_nodes)
    models = sorted({d.model for n in gpu_nodes for d in n.devices})
    largest = max(len(n.devices) for n in gpu_nodes)
    most_cards = {m: _most_cards(gpu_nodes, m) for m in models}
    room: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = {}  # most CPU and memory able
    out: list[TraceTask] = []
    for i in range(tasks):
        spec: tuple[str, ...] = ()
        if rng.random() < mix.cpu_only:
            count, milli = 0, 0
            demand = float(rng.choice([0.25, 0.5, 1.0, 2.0]))  # in GPUs' worth of CPU
        else:
            kind = rng.random()
            if kind < mix.shared:
                count, milli = 1, _pick(rng, mix.shares)
            elif kind < mix.shared + mix.multi_card:
                count, milli = min(_pick(rng, mix.multi), largest), GPU_MILLI
            else:
                count, milli = 1, GPU_MILLI
            if rng.random() < mix.typed:
                fits = [m for m in models if most_cards[m] >= count]
                spec = (str(rng.choice(fits)),)
            demand = count * milli / GPU_MILLI
        if (count, spec) not in room:
            able = [
                n
                for n in gpu_nodes
                if len(n.devices) >= count and (not spec or n.devices[0].model in spec)
            ]
            room[count, spec] = (max(n.cpu_milli for n in able), max(n.memory_mib for n in able))
        most_cpu, most_memory = room[count, spec]
        cores = demand * per_gpu / 1000.0 * mix.cpu_per_gpu * rng.lognormal(0.0, SPREAD)
        cpu = _cores(cores, most_cpu // 1000)
        gib = int(rng.choice(GIB_PER_CORE))
        memory = min(cpu * gib * 1024, most_memory // 1024 * 1024)
        out.append(TraceTask(f"{mix.name}-{i:05d}", cpu * 1000, memory, count, milli, spec))
    return out


def write_tasks(tasks: Sequence[TraceTask], path: str | Path) -> None:
    """An ``openb_pod_list_*.csv`` with ``tasks`` (read back by ``alibaba.read_tasks``)."""
    fields = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for t in tasks:
            spec = "|".join(t.gpu_spec)
            row = (t.name, t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, spec, "LS")
            writer.writerow((*row, "Running", 0, 0, 0))  # all at time 0: the protocol ignores it


def _pick(rng: np.random.Generator, options: tuple[tuple[int, float], ...]) -> int:
    weights = np.array([w for _, w in options], np.float64)
    return options[int(rng.choice(len(options), p=weights / weights.sum()))][0]


def _most_cards(nodes: Sequence[Node], model: str) -> int:
    return max(
        (len(n.devices) for n in nodes if n.devices and n.devices[0].model == model), default=0
    )


def _cores(cores: float, limit: int) -> int:
    """The request size people would write for ``cores``: the nearest of ``CORES`` (at most
    ``limit``, at least 1)."""
    allowed = [c for c in CORES if c <= limit] or [max(1, limit)]
    target = math.log(max(cores, 0.5))
    return min(allowed, key=lambda c: abs(math.log(c) - target))
