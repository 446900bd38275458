"""The plane's pending jobs, with a running count per tenant of jobs and replicas.

A submission is checked against its tenant's limits on queued work (``services/grants.py``)
under the plane's lock; counting the tenant's pending jobs there by scanning them all would make
every tenant's submission cost as much as the largest queue, which is what one tenant flooding
the pool controls. The counts are kept as jobs come and go instead: this is a dict whose every
way of adding or removing an entry updates them, so the code that queues, places, cancels and
requeues jobs stays as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from xpupool.engine.fragmentation.measure import ShapeKey, shape_key
from xpupool.model.request import Request


class Queued(Protocol):
    """What the counts need of a pending job."""

    tenant: str
    request: Request
    site: str | None  # the site it was dispatched to (None: not dispatched)

    def keep_to(self, site: str | None) -> None: ...


P = TypeVar("P", bound=Queued)


class PendingJobs(dict[int, P]):
    """``{job id: pending job}`` that knows, per tenant, how many jobs and replicas it holds."""

    def __init__(self, items: Mapping[int, P] | Iterable[tuple[int, P]] = ()) -> None:
        super().__init__()
        self._jobs: dict[str, int] = {}
        self._replicas: dict[str, int] = {}
        self._dispatched: dict[ShapeKey, Counter[str]] = {}
        self.update(items)

    def tally(self, tenant: str) -> tuple[int, int]:
        """(pending jobs, their replicas) of ``tenant``."""
        return self._jobs.get(tenant, 0), self._replicas.get(tenant, 0)

    def _count(self, job: P, sign: int) -> None:
        t = job.tenant
        self._jobs[t] = self._jobs.get(t, 0) + sign
        self._replicas[t] = self._replicas.get(t, 0) + sign * job.request.replicas
        if job.site is not None:
            self._dispatched.setdefault(shape_key(job.request), Counter())[job.site] += sign

    def dispatched(self, req: Request) -> Mapping[str, int]:
        """Per site, the pending jobs of ``req``'s shape dispatched there."""
        return self._dispatched.get(shape_key(req), Counter())

    def dispatch(self, job_id: int, site: str | None) -> None:
        """Keep pending job ``job_id`` to ``site`` (None: to the sites it asked for again)."""
        job = self[job_id]
        self._count(job, -1)
        job.keep_to(site)
        self._count(job, +1)

    def __setitem__(self, job_id: int, job: P) -> None:
        old = super().get(job_id)
        if old is not None:
            self._count(old, -1)
        super().__setitem__(job_id, job)
        self._count(job, +1)

    def __delitem__(self, job_id: int) -> None:
        self._count(self[job_id], -1)
        super().__delitem__(job_id)

    def pop(self, job_id: int, *default: P | None) -> P | None:  # type: ignore[override]
        if job_id in self:
            job = super().pop(job_id)
            self._count(job, -1)
            return job
        if default:
            return default[0]
        raise KeyError(job_id)

    def popitem(self) -> tuple[int, P]:
        job_id, job = super().popitem()
        self._count(job, -1)
        return job_id, job

    def setdefault(self, job_id: int, job: P) -> P:
        if job_id not in self:
            self[job_id] = job
        return self[job_id]

    def update(  # type: ignore[override]
        self, items: Mapping[int, P] | Iterable[tuple[int, P]] = (), /
    ) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        for job_id, job in pairs:
            self[job_id] = job

    def clear(self) -> None:
        super().clear()
        self._jobs.clear()
        self._replicas.clear()
        self._dispatched.clear()

    def __ior__(self, other: Mapping[int, P]) -> PendingJobs[P]:  # type: ignore[override,misc]
        self.update(other)
        return self
