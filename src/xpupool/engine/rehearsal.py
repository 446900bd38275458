"""Rehearsal: tell which of two placement profiles strands less of a target workload, by filling a
sample of the fleet with draws from that workload under each, before placing anything for real.

Why: some choices of a placement policy (how finely xpupool's score tells near-equal nodes apart)
win on one workload and lose on another, and nothing simple in the workload says which (see
``docs/placement-policy.md``). The policy sees the workload, so it can try both on it: the same
random quarter of the nodes (at most ``MAX_SAMPLE``) and the same random draws of shapes for both
profiles (paired), repeated ``SEEDS`` times; each run places draws until the compute that arrived
reaches the sample's capacity (the FGD protocol's "arrived = 100 %") and measures the idle device
compute then. The profile that strands less on average wins; a tie keeps the first. Where the two
differ little the rehearsal may pick either, and then little is at stake.

A rehearsal is deterministic in the fleet and the workload, so its verdict is kept per process: a
simulator replaying several seeds of one trace rehearses once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xpupool.engine.engine import Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.profile import Profile
from xpupool.engine.state import ClusterState
from xpupool.model import Node

SEEDS = 5  # paired runs per profile
FRACTION = 0.25  # of the fleet's nodes in each run's sample
MAX_SAMPLE = 400  # nodes, so that the cost stops growing with the fleet
MIN_NODES = 200  # smaller fleets are not rehearsed: their runs are too noisy to compare
_verdicts: dict[bytes, Rehearsal] = {}  # digest of (nodes, workload, profiles) -> result


def stranded(nodes: Sequence[Node], workload: TargetWorkload, profile: Profile, seed: int) -> float:
    """% of the device compute of ``nodes`` left idle once draws from ``workload`` worth all of it
    have arrived, placed with ``profile`` (the draws that do not fit are dropped); 0 when the nodes
    have no devices or the workload no device shapes (nothing could ever arrive)."""
    state = ClusterState(list(nodes), seed=seed)
    capacity = float(state.node_dev_core_total.sum())
    if capacity <= 0 or not _asks_for_devices(workload):
        return 0.0
    engine = Engine(state, profile, seed=seed, workload=workload)
    weights = np.asarray(workload.weights, np.float64)
    rng = np.random.default_rng(seed)
    arrived = 0.0
    while True:
        for index in rng.choice(len(workload.shapes), 1024, p=weights / weights.sum()).tolist():
            shape = workload.shapes[index]
            d = shape.devices
            arrived += d.count * (d.need_core_permille or 1000)
            if arrived > capacity:
                idle = float(state.dev_core_free[state.dev_present].sum())
                return 100.0 * idle / capacity
            engine.place(shape)  # names do not matter here: nothing is released or looked up


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """Mean % of device compute left idle under each profile, over ``runs`` paired runs."""

    first: float
    second: float
    runs: int

    @property
    def second_is_better(self) -> bool:
        return self.second < self.first


def rehearse(
    nodes: Sequence[Node], workload: TargetWorkload, first: Profile, second: Profile
) -> Rehearsal | None:
    """Both profiles over ``SEEDS`` paired runs; None (not rehearsed) for fleets under ``MIN_NODES``
    or a workload without device shapes."""
    if len(nodes) < MIN_NODES or not _asks_for_devices(workload):
        return None
    key = hashlib.sha256(repr((list(nodes), workload, first, second)).encode()).digest()
    found = _verdicts.get(key)
    if found is None:
        totals = [0.0, 0.0]
        for seed in range(SEEDS):
            rng = np.random.default_rng(seed)
            size = min(math.ceil(FRACTION * len(nodes)), MAX_SAMPLE)
            picked = sorted(rng.choice(len(nodes), size, replace=False).tolist())
            sample = [nodes[i] for i in picked]
            totals[0] += stranded(sample, workload, first, seed)
            totals[1] += stranded(sample, workload, second, seed)
        if len(_verdicts) >= 16:
            _verdicts.clear()
        found = _verdicts[key] = Rehearsal(totals[0] / SEEDS, totals[1] / SEEDS, SEEDS)
    return found


def second_is_better(
    nodes: Sequence[Node], workload: TargetWorkload, first: Profile, second: Profile
) -> bool:
    """Does ``second`` strand less than ``first`` on average over ``SEEDS`` paired runs? False when
    not rehearsed (:func:`rehearse`)."""
    found = rehearse(nodes, workload, first, second)
    return found is not None and found.second_is_better


def _asks_for_devices(workload: TargetWorkload) -> bool:
    """Does some shape of ``workload`` ask for devices? Without one nothing ever arrives."""
    return any(shape.devices.count for shape in workload.shapes)
