"""The engine's queue from the server's queue form (stored rows and ``QueueIn`` bodies alike), so
the server and the timed simulator build a queue the same way."""

from __future__ import annotations

from collections.abc import Iterable

from xpupool.engine.cycle import Preemption, QueueSpec, Quota, Resource, Unlisted
from xpupool.server.schemas.queues import QueueIn, QuotaIn


def queue_spec(
    name: str,
    tenant: str,
    cohort: str | None,
    quotas: Iterable[object],
    weight: float = 1.0,
    preemption: str | None = None,
    unlisted_flavors: str | None = None,
    allow_unfittable: bool | None = None,
    preempts_min_run: bool | None = None,
) -> QueueSpec:
    """The engine's queue from stored JSON quotas; ``weight`` is the tenant's fair-share weight;
    the policies as stored (None, from before their columns: the defaults)."""
    out = []
    for q in quotas:
        qi = QuotaIn.model_validate(q)
        out.append(Quota(qi.flavor, Resource(qi.resource.value), qi.nominal, qi.borrowing_limit))
    policy = Preemption(preemption) if preemption else Preemption.LOWER_PRIORITY
    unlisted = Unlisted(unlisted_flavors) if unlisted_flavors else Unlisted.ALLOW
    return QueueSpec(
        name,
        tenant,
        tuple(out),
        cohort,
        weight,
        policy,
        unlisted,
        bool(allow_unfittable),
        bool(preempts_min_run),
    )


def queue_spec_of(body: QueueIn, weight: float = 1.0) -> QueueSpec:
    """The engine's queue for a ``QueueIn`` body."""
    quotas = [q.model_dump(mode="json") for q in body.quotas]
    return queue_spec(
        body.name,
        body.tenant,
        body.cohort,
        quotas,
        weight,
        body.preemption.value,
        body.unlisted_flavors.value,
        body.allow_unfittable,
        body.preempts_min_run,
    )
