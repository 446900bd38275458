"""Tentative allocations that commit together or not at all (gangs, preemption what-ifs).

Nothing mutates cluster state outside a transaction. Rollback reverts in reverse order, and since
apply/revert are exact integer shifts the state after rollback is bit-for-bit what it was.
"""

from __future__ import annotations

from types import TracebackType

from xpupool.engine.state import ClusterState
from xpupool.model.allocation import Allocation


class Transaction:
    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._taken: list[int] = []
        self._open = True

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._state.live[i] for i in self._taken)

    def apply(self, alloc: Allocation) -> None:
        if not self._open:
            raise RuntimeError("transaction is closed")
        self._state.apply(alloc)
        self._taken.append(alloc.id)

    def commit(self) -> None:
        self._open = False

    def rollback(self) -> None:
        for alloc_id in reversed(self._taken):
            self._state.revert(alloc_id)
        self._taken.clear()
        self._open = False

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._open:
            self.rollback()
