"""The work the scheduling cycle decides about, as every part of it sees it: one set of shapes
for the cycle (``cycle.py``) and the mechanisms it calls (reservations, elastic jobs, online
defragmentation), so that none declares its own copy. The server's held and pending jobs and the
timed simulator's tasks have these fields; no part reads more of them than named here."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from xpupool.model.allocation import Allocation
from xpupool.model.request import Request

__all__ = ["Asking", "ElasticWork", "PendingWork", "RunningWork", "Stopping"]


class Asking(Protocol):
    """A pending job, as far as what it asks goes."""

    @property
    def request(self) -> Request: ...


class PendingWork(Asking, Protocol):
    """A job waiting for admission, as the cycle sees it."""

    @property
    def id(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def waiting_on(self) -> set[int]: ...


class Stopping(StrEnum):
    """Why a running job's processes are being stopped, as far as the cycle cares: a victim of
    an earlier preemption is waited on by its preemptor (:attr:`PREEMPT`); any other stop
    (cancelled, node lost, ...) only keeps it from being preempted again or counted as room."""

    PREEMPT = "preempt"
    OTHER = "other"


class RunningWork(Protocol):
    """A job holding devices. ``stopping`` says why its processes are being stopped, if they are
    (:attr:`Stopping.PREEMPT` for a victim of an earlier decision); it is then neither preempted
    again nor counted as room."""

    @property
    def id(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def allocations(self) -> list[Allocation]: ...
    @property
    def stopping(self) -> Stopping | None: ...


class ElasticWork(RunningWork, Protocol):
    """A running job as growing elastic jobs sees it: also its request (``max_replicas`` set
    when elastic) and its queue."""

    @property
    def queue(self) -> str: ...
    @property
    def request(self) -> Request: ...
