"""Tentative changes to the cluster state that commit together or not at all.

Gangs, preemption what-ifs and quota trials all go through one: nothing mutates cluster state
outside a transaction. A transaction records every allocation it applies and every one it releases;
rollback undoes them in reverse order, and since apply/revert are exact integer shifts the state
after rollback is bit-for-bit what it was. A transaction opened inside another (``parent``) hands
its record to the parent on commit, so a what-if can place a whole request and still undo it.
What must happen only once the changes are real (the engine's learners told of a placement) is
registered with :meth:`Transaction.on_commit`: it runs when the outermost transaction commits, and
never when any of them rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from xpupool.engine.state import ClusterState
from xpupool.model.allocation import Allocation


class Transaction:
    def __init__(self, state: ClusterState, parent: Transaction | None = None) -> None:
        if parent is not None and parent.state is not state:
            raise ValueError("a nested transaction must work on its parent's state")
        self.state: ClusterState = state
        self._parent = parent
        self._journal: list[tuple[bool, Allocation]] = []  # (applied, allocation) in order
        self._taken: list[int] = []
        self._on_commit: list[Callable[[], None]] = []
        self._open = True

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        """What this transaction applied and still holds, in the order applied."""
        return tuple(self.state.live[i] for i in self._taken if i in self.state.live)

    def apply(self, alloc: Allocation) -> None:
        self._check_open()
        self.state.apply(alloc)
        self._journal.append((True, alloc))
        self._taken.append(alloc.id)

    def release(self, alloc_id: int) -> Allocation:
        """Give back a live allocation for the length of the transaction; rollback re-applies it."""
        self._check_open()
        alloc = self.state.revert(alloc_id)
        self._journal.append((False, alloc))
        return alloc

    def on_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once this transaction's changes are real: when it commits, or, inside a
        parent, when the outermost one does; dropped on a rollback."""
        self._check_open()
        self._on_commit.append(action)

    def commit(self) -> None:
        self._check_open()
        if self._parent is not None:
            self._parent._check_open()
            self._parent._journal.extend(self._journal)
            self._parent._taken.extend(self._taken)
            self._parent._on_commit.extend(self._on_commit)
        self._open = False
        if self._parent is None:
            for action in self._on_commit:
                action()
        self._on_commit.clear()

    def rollback(self) -> None:
        for applied, alloc in reversed(self._journal):
            if applied:
                self.state.revert(alloc.id)
            else:
                self.state.apply(alloc)
        self._journal.clear()
        self._taken.clear()
        self._on_commit.clear()
        self._open = False

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("transaction is closed")

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
