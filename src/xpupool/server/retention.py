"""How long and how many finished jobs the server keeps (``xpupool up --retain-jobs``,
``--retain-count``): set by the admin, read by the sweep in ``services/job_limits.py``."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RETAIN_S = 7 * 86_400.0
DEFAULT_RETAIN_JOBS = 10_000


@dataclass(frozen=True, slots=True)
class Retention:
    """Finished jobs are kept ``seconds`` after their last change and at most ``jobs`` of them
    (the oldest go first); None: no limit of that kind."""

    seconds: float | None = DEFAULT_RETAIN_S
    jobs: int | None = DEFAULT_RETAIN_JOBS
