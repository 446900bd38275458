"""Energy of a timed replay (issue 55): what the fleet's cards drew while it ran, from the one
power model (``catalog/power.py``).

A card holding work draws ``idle + (busy - idle) x share`` (the compute share its replicas hold,
at most 1: a held share counts as used); an idle card draws its sleep power (``sleep_fraction`` of
its idle power: 1.0 where it has no low-power state), as if put to sleep at once; a node whose cards
have all been idle for ``node_off_after_s`` is powered down (Slurm's power saving) and its cards draw
nothing until work comes back. Host power (CPUs, fans, memory) is not counted: cards only. The
window is the replay's, from time 0 to the last run's end, for every policy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from xpupool.catalog.power import PowerModel
from xpupool.model import Allocation, Node

WHOLE = 1000.0


@dataclass(frozen=True, slots=True)
class EnergyFigures:
    """Joules drawn by the cards (holding work, idle and awake as sleeping, and in total) and the
    card-seconds of powered-down nodes."""

    busy_j: float
    idle_j: float
    off_card_s: float

    @property
    def total_j(self) -> float:
        return self.busy_j + self.idle_j

    @property
    def kwh(self) -> float:
        return self.total_j / 3.6e6


@dataclass
class EnergyMeter:
    """Collects each run's allocations from ``timed_replay(on_run=...)``: per card, the times its
    held share changed."""

    changes: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    _held: dict[int, Sequence[Allocation]] = field(default_factory=dict)
    end: int = 0

    def __call__(self, now: int, task: int, allocations: Sequence[Allocation] | None) -> None:
        self.end = max(self.end, now)
        sign = 1.0
        if allocations is None:
            allocations = self._held.pop(task, ())
            sign = -1.0
        else:
            self._held[task] = allocations
        for alloc in allocations:
            for share in alloc.devices:
                self.changes[share.uuid].append((now, sign * share.core_permille / WHOLE))

    def energy(
        self,
        nodes: Sequence[Node],
        power: PowerModel,
        *,
        sleep_fraction: float = 1.0,
        node_off_after_s: float = 600.0,
        end: int | None = None,
    ) -> EnergyFigures:
        """The cards' energy from time 0 to ``end`` (default: the last run's end)."""
        until = self.end if end is None else end
        busy_j = idle_j = off_card_s = 0.0
        for node in nodes:
            if not node.devices:
                continue
            figures = [power.figures(d.model) for d in node.devices]
            uuids = [d.uuid for d in node.devices]
            events = sorted(
                (t, i, delta) for i, uuid in enumerate(uuids) for t, delta in self.changes[uuid]
            )
            share = [0.0] * len(uuids)
            idle_since = 0.0
            t0 = 0.0
            k = 0
            while t0 < until:
                while k < len(events) and events[k][0] <= t0:
                    share[events[k][1]] += events[k][2]
                    k += 1
                t1 = float(min(events[k][0], until)) if k < len(events) else float(until)
                span = t1 - t0
                held = [max(0.0, min(s, 1.0)) if s > 1e-9 else 0.0 for s in share]
                if any(held):
                    idle_since = t1
                    for f, s in zip(figures, held, strict=True):
                        if s:
                            busy_j += (f.idle_watts + (f.busy_watts - f.idle_watts) * s) * span
                        else:
                            idle_j += f.idle_watts * sleep_fraction * span
                else:
                    on_until = min(t1, max(t0, idle_since + node_off_after_s))
                    awake_s = max(0.0, on_until - t0)
                    idle_j += sum(f.idle_watts for f in figures) * sleep_fraction * awake_s
                    off_card_s += (span - awake_s) * len(figures)
                t0 = t1
        return EnergyFigures(busy_j, idle_j, off_card_s)
