"""Which pending jobs one scheduling pass tries: the retry gate in front of the cycle.

A job that was tried and stayed pending cannot fit before the pool changes: capacity and quota
only shrink while nothing is released, added or uncordoned. So the gate counts those changes
(the *capacity generation*) and a job remembers the generation it last failed at (kube's
unschedulable queue): it is tried again only once the generation has moved. When it moves (a
release), every failed job could fit again, and retrying all of them on every release would let
one tenant's long queue set everyone's pace (issue 18), so a pass takes at most
``retries_per_tenant`` retries of each tenant: the highest priority first, then those tried
longest ago. New jobs are always tried. A retry waiting out its backoff (``not_before``, after a
failed run) is not tried before then.

The server's scheduling loop and the timed simulator hold one gate each, so a replay tries the
same jobs per pass as the server would. The gate does no I/O and knows no server types: the
pending job's fields it reads are :class:`GatedWork`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

RETRIES_PER_TENANT = 16
"""Jobs of one tenant that failed before and are tried again in one pass."""

PERIODIC_PASS_S = 1.0
"""A pass runs at least this often (the server's loop, woken or not): retries left out by a pass
that placed nothing are tried within it, not at the next event."""

NEVER_TRIED = -1
"""The generation of a job not tried yet (new, requeued, or made worth a try by a change of its
own, such as a lowered priority): tried in the next pass whatever the generation."""


class GatedWork(Protocol):
    """A pending job as the gate sees it. ``tried``: the capacity generation it last failed at
    (:data:`NEVER_TRIED` when it has not); ``not_before``: when its backoff ends (same clock as
    the ``now`` the caller passes; 0 when it has none)."""

    tried: int

    @property
    def id(self) -> int: ...
    @property
    def tenant(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def not_before(self) -> float: ...


W = TypeVar("W", bound=GatedWork)


@dataclass(frozen=True, slots=True)
class PassChoice(Generic[W]):
    """The jobs a pass tries, new ones first in the order given, then each tenant's retries;
    ``left_out``: some retries are due but past their tenant's cap this pass."""

    jobs: list[W]
    left_out: bool

    def again_at_once(self, placed: int) -> bool:
        """Whether the next pass should follow at once: retries were left out while some jobs
        fitted, a backlog that fits is worth going on with now, not at the next event or
        period."""
        return self.left_out and placed > 0


class RetryGate:
    """The capacity generation and the rule that reads it (see the module docstring)."""

    def __init__(self, retries_per_tenant: int = RETRIES_PER_TENANT) -> None:
        if retries_per_tenant < 1:
            raise ValueError("retries_per_tenant must be at least 1")
        self.retries_per_tenant = retries_per_tenant
        self.generation = 0

    def capacity_changed(self) -> None:
        """Something was released, added, uncordoned or re-quoted: each failed job may fit now."""
        self.generation += 1

    def choose(self, pending: Iterable[W], now: float) -> PassChoice[W]:
        """The jobs this pass tries (see the module docstring): every job not tried yet, and of
        those that failed at an older generation, at most ``retries_per_tenant`` per tenant, by
        priority (highest first), then the generation they last failed at (oldest first), then
        id. Jobs whose backoff lasts past ``now`` are not tried."""
        fresh: list[W] = []
        again: dict[str, list[W]] = defaultdict(list)
        for job in pending:
            if job.not_before > now:
                continue  # a retry waiting out its backoff (a later pass finds it)
            if job.tried < 0:  # NEVER_TRIED
                fresh.append(job)
            elif job.tried != self.generation:
                again[job.tenant].append(job)
        left_out = False
        for jobs in again.values():
            if len(jobs) > self.retries_per_tenant:
                jobs.sort(key=lambda j: (-j.priority, j.tried, j.id))
                left_out = True
            fresh.extend(jobs[: self.retries_per_tenant])
        return PassChoice(fresh, left_out)

    def tried_now(self, job: GatedWork) -> bool:
        """Whether ``job`` already failed at the current generation (a pass skips it)."""
        return job.tried == self.generation

    def failed(self, job: GatedWork, generation: int) -> None:
        """``job`` was tried and stays pending: not worth a try again before the generation
        moves past ``generation`` (the one read before deciding it, so a change made while it
        was decided, such as its victims released at once, still counts)."""
        job.tried = generation
