"""The FastAPI application: routers, error mapping, metrics, and the background loops.

Errors are answered as ``error_answers.py`` says (422 ``{field, value, reason}`` for bad input,
404, 409, 403, 429, 503 while the store cannot be written, logged once by ``health.py``); a body
over the size limit -> 413 (``body_limit.py``); over a rate limit -> 429 with ``Retry-After``
(``rate_limit.py``); anything else is a bug and is logged (a 500 with no details).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import OperationalError

from xpupool.model.errors import (
    Conflict,
    Forbidden,
    NotFound,
    NotGranted,
    RequestError,
    Unavailable,
)
from xpupool.server import rehearsal
from xpupool.server.audit_http import AuditMiddleware
from xpupool.server.body_limit import DEFAULT_MAX_BODY, LOG_UPLOAD, BodyLimit
from xpupool.server.error_answers import error_answer, validation_answer
from xpupool.server.front.plane_side import ProxyChannel
from xpupool.server.front.proxy_plane import ProxyAnswers
from xpupool.server.history import FleetHistory
from xpupool.server.metrics import make_registry
from xpupool.server.plane import ControlPlane
from xpupool.server.rate_limit import RateLimiter, RateLimitGate
from xpupool.server.routers import (
    agents,
    audit,
    billing,
    defrag,
    fleet,
    jobs,
    models,
    reservations,
    secrets,
    service_tokens,
    services,
    tenants,
    throughput,
    usage,
    volumes,
)
from xpupool.server.routers.deps import MetricsAuth, MetricsReader
from xpupool.server.scheduler_loop import run_passes
from xpupool.server.service_access import PlaneSource, ServiceTokenCache
from xpupool.server.service_controller import ServiceController, run_services
from xpupool.server.service_endpoints import NO_ENDPOINTS
from xpupool.server.service_proxy import ProxyFirst, ServiceProxy
from xpupool.server.services.agents import mark_lost_nodes
from xpupool.server.services.job_limits import FinishedSweep, stop_idle, stop_overdue
from xpupool.server.services.reservations import WindowEdges
from xpupool.server.store_off_loop import unreachable_answer
from xpupool.server.web import mount as mount_dashboard

log = logging.getLogger("xpupool.server")


class LostNodeWatch(threading.Thread):
    """Every half heartbeat: lost nodes, runs past their limit, the retention sweep, the
    audit's refusal counts (``audit.py``), a fleet history sample when one is due
    (``history.py``) and, every heartbeat interval, the usage records (``usage/meter.py``)."""

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(name="xpupool-lost-nodes", daemon=True)
        self.plane = plane
        self.stopped = threading.Event()
        self.history = FleetHistory(plane)
        self.retention = FinishedSweep(plane, plane.retention)
        self.windows = WindowEdges(plane)  # reservations' starts and ends
        self.metered = -float("inf")  # the plane's monotonic time of the last usage flush

    def run(self) -> None:
        while not self.stopped.wait(max(self.plane.heartbeat_s / 2, 0.05)):
            writable = False
            try:
                writable = self.plane.check_store()  # while the store fails: is it back?
                if writable:
                    mark_lost_nodes(self.plane)
                    stop_overdue(self.plane)
                    stop_idle(self.plane)
                    self.windows.check()
                    self.retention.sweep()
                    self.plane.audit.flush()
            except Unavailable:
                pass  # said once, by the plane's health
            except Exception:
                log.exception("lost-node check failed")
            if writable:  # no sample while the store fails (the plane's health says so once)
                self._sample()

    def _sample(self) -> None:
        try:
            self.history.maybe_sample()
        except Exception:  # a history write that fails is not the pool's failure
            self.history.last = self.plane.clock()  # tried again one interval later
            log.exception("fleet history sample failed")
        now = self.plane.monotonic()
        if now - self.metered >= self.plane.meter.every_s:  # usage, once an interval
            self.metered = now
            try:
                self.plane.meter.flush(self.plane)
            except Exception:  # kept in memory, written at the next interval
                log.exception("usage flush failed")


def create_app(
    plane: ControlPlane,
    *,
    background: bool = True,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    on_stopped: Callable[[], None] | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    channel: ProxyChannel | None = None,
    limiter: RateLimiter | None = None,
    metrics_auth: MetricsAuth = "token",
) -> FastAPI:
    """The app over ``plane``. ``background`` runs the scheduling passes on the app's event loop and
    the lost-node thread (tests of routers alone may turn them off and call ``schedule_pass``
    themselves) and starts the engine's loops' warm-up (``rehearsal.warm_in_background``): the plane
    alone never warms them. ``max_body``: the largest request body taken, in bytes (an agent's log
    upload may always send a full chunk). ``channel``: the channel the service proxy's own process
    polls (``front/plane_side.py``), listening while the app runs, on its event loop. ``on_stopped``: called
    once the background loops are stopped (``up`` releases the store there: a write after it is
    refused, never half done). ``limiter``: requests per credential and per address, counted before
    anything else runs (``rate_limit.py``; None: no limit). ``metrics_auth``: who may
    read ``/metrics`` (``routers/deps.py`` ``metrics_reader``)."""

    tokens = ServiceTokenCache()
    proxy = ServiceProxy(PlaneSource(plane, tokens), plane.service_traffic)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        watch: LostNodeWatch | None = None
        passes: asyncio.Task[None] | None = None
        keeper: asyncio.Task[None] | None = None  # the service controller's (issue 47)
        if background:
            # The engine's loops load from numba's cache (or compile, on a first start) on a
            # thread from here, as the socket starts listening: not beside the start's imports
            # and the plane's opening, which they slowed by holding the interpreter half the
            # time (docs/benchmarks.md, start-up). The passes wait for them off the event loop
            # (rehearsal.py). The share prices' LP solver is not imported with them:
            # ``xpupool up`` imports it at a quiet moment (server/up.py).
            rehearsal.warm_in_background(rehearsal.plane_profiles(plane), plane.profiles)
            watch = LostNodeWatch(plane)
            watch.start()
            passes = asyncio.get_running_loop().create_task(run_passes(plane))
            if plane.service_endpoints is NO_ENDPOINTS:
                # the controller finds agent sites' replicas; endpoints given before the start
                # (a test's fixed list, the proxy benchmark's stub) are kept, and no
                # controller runs beside them
                plane.service_endpoints = controller = ServiceController(plane)
                keeper = asyncio.get_running_loop().create_task(run_services(controller))
        if channel is not None:
            await channel.start()
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            if on_stop is not None:  # off the loop: what it stops may wait for the loop's answers
                await asyncio.to_thread(on_stop)
            if channel is not None:
                await channel.stop()
            await proxy.close()
            if keeper is not None:
                keeper.cancel()
                with suppress(asyncio.CancelledError):
                    await keeper
            if passes is not None:
                passes.cancel()  # between two batches: a batch is never cut short
                with suppress(asyncio.CancelledError):
                    await passes
            if watch is not None:
                watch.stopped.set()
            with suppress(Exception):  # the refusals counted since the last flush; a store
                await asyncio.to_thread(plane.audit.flush)  # that fails said so already
            if on_stopped is not None:  # the last step: uvicorn may end the process by a signal
                on_stopped()

    app = FastAPI(
        title="xpupool",
        version="0.1.0",
        description="One pool and one scheduler for a mixed accelerator fleet. Every endpoint "
        "takes `Authorization: Bearer <token>`.",
        lifespan=lifespan,
        responses={
            401: {"description": "Missing or unknown token"},
            422: {"description": "Invalid input", "model": None},
        },
    )
    app.state.plane = plane
    app.state.metrics_auth = metrics_auth
    app.state.service_tokens = tokens  # the revoke route drops a token from it
    if channel is not None:  # the proxy process polls the plane's endpoints and tokens
        channel.proxy = ProxyAnswers(plane, tokens)
    app.add_middleware(BodyLimit, max_bytes=max_body, routes=[LOG_UPLOAD])
    registry = make_registry(plane, limiter)
    app.add_middleware(AuditMiddleware, plane=plane)
    if limiter is not None:  # a refused request costs no audit row, no body read
        app.add_middleware(RateLimitGate, limiter=limiter)
    # a service's proxy path before all of the API's (service_proxy.py: its every request)
    app.add_middleware(ProxyFirst, proxy=proxy)

    # /healthz and /metrics first: FastAPI builds an included router's routes when a request is
    # first matched against them (all of a router's at once: docs/benchmarks/startup-42.md), so
    # a health check answered before them is answered without waiting for that.
    @app.get("/healthz", response_class=PlainTextResponse, tags=["ops"])
    def healthz() -> PlainTextResponse:
        """'ok', or 503 'unhealthy: <reason>' while the store cannot be written or does not
        answer; below it, one
        line per inconsistency the last start found in the store and set aside."""
        plane.check_store()
        healthy, text = plane.health.report()
        stall = plane.store_stall() if healthy else None  # a write hangs: not known failed yet
        if stall is not None:
            healthy, text = False, f"unhealthy: {stall}\n"
        return PlainTextResponse(text, status_code=200 if healthy else 503)

    @app.get("/metrics", tags=["ops"])
    def metrics(_: MetricsReader) -> Response:
        """Prometheus exposition (names in the README). It names every tenant, queue and node:
        the admin token or a metrics token is needed, unless the server was started with
        ``--metrics-auth open`` (docs/security.md)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # Routes are matched in this order, one after another: the busiest first (submissions,
    # then every node's heartbeats): each route matched before a submission's is paid by every
    # submission (issue 25; docs/benchmarks.md and its history). No two routers share a path.
    for router in (
        jobs.router,
        agents.router,
        tenants.router,
        fleet.router,
        models.router,
        audit.router,
        secrets.router,
        volumes.router,
        reservations.router,
        service_tokens.router,
        services.router,
        usage.router,
        billing.router,
        throughput.router,
        defrag.router,
    ):
        app.include_router(router)

    async def _answer(_: Request, exc: Exception) -> JSONResponse:
        answer = error_answer(exc)
        assert answer is not None  # registered below for the classes it answers only
        return JSONResponse(answer.body, status_code=answer.status, headers=dict(answer.headers))

    for answered in (
        RequestError,
        NotGranted,
        Forbidden,
        NotFound,
        Conflict,
        Unavailable,
        HTTPException,
    ):
        app.add_exception_handler(answered, _answer)

    @app.exception_handler(OperationalError)
    async def _unreachable(_: Request, exc: OperationalError) -> JSONResponse:
        """A read the store did not answer (a connection that timed out, a lost one): 503, as a
        write that fails answers (``ControlPlane.write``), not a 500 as if it were a bug."""
        answer = unreachable_answer(exc)
        return JSONResponse(answer.body, status_code=answer.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        answer = validation_answer(exc.errors())
        return JSONResponse(answer.body, status_code=answer.status)

    mount_dashboard(app)  # the web dashboard at / (server/web/), after the handlers it wraps

    return app
