"""Allocation ids: one counter per pool that outlives the engines built over it.

An allocation id names a replica's hold on devices outside the engine: the server stores it and
hands it to the node agent, which never runs an allocation it has finished again, and the
Kubernetes extender keys its charges and preemption victims by it. A front rebuilds its engine
whenever the inventory changes (a node registers, the server restarts), so a counter kept inside
one engine numbered from 1 again after each rebuild, and the next job got an id an agent had
already finished: it sat ``scheduled`` for ever, holding its cards (issue 43, item 3). The front
therefore holds one :class:`AllocationIds` and hands it to every engine it builds; a front with a
store also raises it to the mark it stored (``server/storage/pool.py``) before the first engine.
"""

from __future__ import annotations

__all__ = ["AllocationIds"]


class AllocationIds:
    """Hands out allocation ids that never repeat: each above every id handed out or seen.

    Not thread-safe: a front uses it under the lock that guards its engine.
    """

    __slots__ = ("_next",)

    def __init__(self, first: int = 1) -> None:
        if first < 1:
            raise ValueError(f"allocation ids start at 1 or above, not {first}")
        self._next = first

    @property
    def next(self) -> int:
        """The id :meth:`take` will hand out; every id handed out or seen is below it."""
        return self._next

    def take(self) -> int:
        """A new id. Ids of placements later rolled back are not handed out again: a gap
        costs nothing, a repeat may be an id some agent has already finished."""
        taken = self._next
        self._next += 1
        return taken

    def seen(self, alloc_id: int) -> None:
        """``alloc_id`` is in use (restored from a store, or from a pod's charge): never hand
        it out, nor any id below it."""
        if alloc_id >= self._next:
            self._next = alloc_id + 1
