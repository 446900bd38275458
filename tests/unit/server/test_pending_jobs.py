"""The per-tenant counts of ``PendingJobs`` stay exact whichever way jobs come and go."""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.model.request import Request
from xpupool.server.pending_jobs import PendingJobs


@dataclass
class Job:
    tenant: str
    request: Request
    site: str | None = None

    def keep_to(self, site: str | None) -> None:
        self.site = site


def _job(tenant: str, replicas: int = 1) -> Job:
    return Job(tenant, Request(replicas=replicas))


def test_counts_follow_every_mutation() -> None:
    book: PendingJobs[Job] = PendingJobs({1: _job("a", 3)})
    book[2] = _job("a")
    book[3] = _job("b", 5)
    assert book.tally("a") == (2, 4) and book.tally("b") == (1, 5)
    book[2] = _job("a", 10)  # replaced: the old one no longer counts
    assert book.tally("a") == (2, 13)
    assert book.pop(1) is not None and book.pop(99, None) is None
    del book[3]
    assert book.tally("a") == (1, 10) and book.tally("b") == (0, 0)
    book.setdefault(4, _job("c", 2))
    book.update({5: _job("c")})
    book |= {6: _job("c")}
    assert book.tally("c") == (3, 4)
    book.popitem()
    assert book.tally("c") == (2, 3)
    book.clear()
    assert book.tally("a") == (0, 0) and not book


def test_an_unknown_tenant_has_nothing_pending() -> None:
    assert PendingJobs[Job]().tally("nobody") == (0, 0)


def test_dispatched_jobs_are_counted_per_site_and_shape() -> None:
    """The site choice's queue positions (issue 51): a dispatch moves a job's count from no site
    to its site, and every way out of the book takes it away."""
    book: PendingJobs[Job] = PendingJobs({1: _job("a"), 2: _job("a"), 3: _job("a", 2)})
    one = Request(replicas=1)
    assert dict(book.dispatched(one)) == {}
    book.dispatch(1, "near")
    book.dispatch(2, "near")
    book.dispatch(3, "near")  # another shape? replicas are not part of it: same shape
    assert book.dispatched(one)["near"] == 3
    book.dispatch(2, "far")
    assert book.dispatched(one)["near"] == 2 and book.dispatched(one)["far"] == 1
    book.dispatch(1, None)
    del book[3]
    book.pop(2)
    assert book.dispatched(one)["near"] == 0 and book.dispatched(one)["far"] == 0
