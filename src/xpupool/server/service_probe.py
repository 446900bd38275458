"""Readiness of service replicas: an HTTP GET of the service's path on each running replica, every
interval, judged by consecutive results (``failures`` failed make a ready replica unready,
``successes`` good make it ready), as Kubernetes' readiness probes are.

The probes run on the server's event loop as tasks of their own, at most ``MAX_PROBES`` at a time,
each bounded by its timeout, so a replica that hangs delays nothing: not the scheduling passes that
share the loop, not the other replicas' probes, not the controller's next pass, which reads only
the verdicts reached so far. A 2xx or 3xx answer is ready; anything else (a refused connection, a
timeout, a 5xx while a model loads) is not.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xpupool.server.schemas.services import Readiness

if TYPE_CHECKING:
    import httpx  # imported where the first probe runs (service_controller.run_services)

MAX_PROBES = 64
"""Probes in flight at once, over every service; more wait for a free slot."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one replica is probed."""

    host: str
    port: int
    readiness: Readiness

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.readiness.path}"


@dataclass(slots=True)
class _Probed:
    target: Target
    ready: bool = False
    ready_since: float | None = None
    good_run: int = 0
    bad_run: int = 0
    last_at: float | None = None  # when the last probe started
    busy: bool = False
    last_error: str = ""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class Prober:
    """The probe verdicts of the replicas it is told to watch (:meth:`watch`), by job id.
    ``watch`` and the verdicts are read from the controller's thread; probes run and record on
    the event loop; each verdict is one field written whole."""

    def __init__(self) -> None:
        self._probed: dict[int, _Probed] = {}
        self._slots: asyncio.Semaphore | None = None

    def watch(self, job_id: int, target: Target) -> None:
        """Probe ``job_id`` at ``target`` from now on; a new target starts over, unready."""
        had = self._probed.get(job_id)
        if had is None or had.target != target:
            self._probed[job_id] = _Probed(target)

    def forget(self, job_id: int) -> None:
        self._probed.pop(job_id, None)

    def keep_only(self, job_ids: set[int]) -> None:
        """Stop watching every replica not in ``job_ids`` (ended, or not running)."""
        for job_id in [j for j in self._probed if j not in job_ids]:
            del self._probed[job_id]

    @property
    def watching(self) -> bool:
        """Whether any replica is to be probed."""
        return bool(self._probed)

    def is_ready(self, job_id: int) -> bool:
        probed = self._probed.get(job_id)
        return probed is not None and probed.ready

    def ready_since(self, job_id: int) -> float | None:
        probed = self._probed.get(job_id)
        return None if probed is None or not probed.ready else probed.ready_since

    def last_error(self, job_id: int) -> str:
        probed = self._probed.get(job_id)
        return "" if probed is None else probed.last_error

    def start_due(self, client: httpx.AsyncClient, now: float) -> list[asyncio.Task[None]]:
        """Start a probe of each watched replica whose interval has passed and which has none in
        flight; the tasks started (on the running loop)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(MAX_PROBES)
        started = []
        for job_id, probed in list(self._probed.items()):
            interval = probed.target.readiness.interval_s
            if probed.busy or (probed.last_at is not None and now - probed.last_at < interval):
                continue
            probed.busy, probed.last_at = True, now
            task = asyncio.get_running_loop().create_task(self._probe(client, job_id, probed))
            probed.tasks.add(task)
            task.add_done_callback(probed.tasks.discard)
            started.append(task)
        return started

    async def _probe(self, client: httpx.AsyncClient, job_id: int, probed: _Probed) -> None:
        import httpx  # in sys.modules by now: the client was made with it

        assert self._slots is not None
        readiness = probed.target.readiness
        error = ""
        try:
            async with self._slots:
                answer = await client.get(probed.target.url, timeout=readiness.timeout_s)
            if not 200 <= answer.status_code < 400:
                error = f"{probed.target.readiness.path} answered {answer.status_code}"
        except httpx.HTTPError as exc:
            error = f"{probed.target.readiness.path}: {type(exc).__name__} {exc}".strip()
        finally:
            probed.busy = False
        loop_now = probed.last_at if probed.last_at is not None else 0.0
        self._record(job_id, probed, error, loop_now)

    def _record(self, job_id: int, probed: _Probed, error: str, at: float) -> None:
        if self._probed.get(job_id) is not probed:  # forgotten or re-targeted meanwhile
            return
        readiness = probed.target.readiness
        probed.last_error = error
        if error:
            probed.good_run, probed.bad_run = 0, probed.bad_run + 1
            if probed.ready and probed.bad_run >= readiness.failures:
                probed.ready, probed.ready_since = False, None
        else:
            probed.good_run, probed.bad_run = probed.good_run + 1, 0
            if not probed.ready and probed.good_run >= readiness.successes:
                probed.ready, probed.ready_since = True, at
