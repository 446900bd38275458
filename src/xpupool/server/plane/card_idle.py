"""Since when each device has held nothing, as far as this plane has seen: what a re-cut's
minimum idle time is counted from (``card_recut.py``, ``xpupool up --recut-min-idle``). Kept in
memory, told by ``ControlPlane.release_job``: after a restart every device counts from the
plane's start, the safe side (a re-cut waits the minimum again). The release of an instance
that a re-cut's own preemption frees (``Preempt.recut_freed``, from
``recutting.recut_victims``, told by :meth:`CardIdle.freed_for_recut`) does not count: its job
was stopped so that the instance could be re-cut, and waiting would let the job, requeued, take
it back first. Every other release, a preemption's too, counts."""

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
        self._for_recut: set[str] = set()  # instances a re-cut's preemption frees

    def freed_for_recut(self, uuids: Iterable[str]) -> None:
        """``uuids`` are being freed by a preemption for the re-cut that destroys them: their
        next release does not restart their idle time."""
        self._for_recut.update(uuids)

    def released(self, allocations: Iterable[Allocation], at: float) -> None:
        """``allocations`` were given back at ``at`` (``ControlPlane.release_job``)."""
        for alloc in allocations:
            for uuid in alloc.device_uuids:
                if uuid in self._for_recut:
                    self._for_recut.discard(uuid)
                else:
                    self._released[uuid] = at

    def idle_since(self, uuid: str) -> float:
        return max(self.started_at, self._released.get(uuid, self.started_at))
