"""Since when each device has held nothing, as far as this plane has seen: what a re-cut's
minimum idle time is counted from (``card_recut.py``, ``xpupool up --recut-min-idle``). Kept in
memory, told by ``ControlPlane.release_job``: after a restart every device counts from the
plane's start, the safe side (a re-cut waits the minimum again). A preempted job's release is
not told: it was stopped so that its instances could be re-cut (``recutting.recut_victims``),
and waiting would let it, requeued, take them back first."""

from __future__ import annotations

from collections.abc import Iterable

from xpupool.model.allocation import Allocation

DEFAULT_MIN_IDLE_S = 300.0
"""How long an instance must have held nothing before a re-cut may destroy it (5 minutes)."""


class CardIdle:
    """Since when each device has held nothing, as far as this plane has seen: the later of the
    plane's start (``started_at``, Unix time) and the last release of an allocation on it."""

    def __init__(self, started_at: float, min_idle_s: float = DEFAULT_MIN_IDLE_S) -> None:
        self.started_at = started_at
        self.min_idle_s = min_idle_s  # xpupool up --recut-min-idle
        self._released: dict[str, float] = {}

    def released(self, allocations: Iterable[Allocation], at: float) -> None:
        """``allocations`` were given back at ``at`` (``ControlPlane.release_job``)."""
        for alloc in allocations:
            for uuid in alloc.device_uuids:
                self._released[uuid] = at

    def idle_since(self, uuid: str) -> float:
        return max(self.started_at, self._released.get(uuid, self.started_at))
