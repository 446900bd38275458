"""How long and how many finished jobs the server keeps (``xpupool up --retain-jobs``,
``--retain-count``): set by the admin, read by the sweep in ``services/job_limits.py``.

The count is per tenant (issue 43, item 7): a global count let one tenant's churn (jobs
submitted and cancelled at once) push every other tenant's finished jobs and logs out of the
store, so what a tenant can make the server forget is only its own."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RETAIN_S = 7 * 86_400.0
DEFAULT_RETAIN_JOBS = 10_000


@dataclass(frozen=True, slots=True)
class Retention:
    """Finished jobs are kept ``seconds`` after their last change, and each tenant keeps at most
    ``jobs`` of its own (its oldest go first); None: no limit of that kind."""

    seconds: float | None = DEFAULT_RETAIN_S
    jobs: int | None = DEFAULT_RETAIN_JOBS
