"""The FastAPI application: routers, error mapping, metrics, and the background loops.

Errors: ``RequestError`` and pydantic validation -> 422 ``{field, value, reason}``; ``NotFound``
-> 404; ``Conflict`` -> 409; anything else is a bug and is logged (a 500 with no details).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.server.metrics import make_registry
from xpupool.server.plane import ControlPlane
from xpupool.server.routers import agents, fleet, jobs, tenants
from xpupool.server.scheduler_loop import SchedulerThread
from xpupool.server.services.agents import mark_lost_nodes

log = logging.getLogger("xpupool.server")


def _body(field: str | None, value: object, reason: str) -> dict[str, object]:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = repr(value)
    return {"field": field, "value": value, "reason": reason}


def _loc(loc: tuple[Any, ...]) -> str:
    """pydantic's ``loc`` as a path: ('body', 'request', 'devices', 0) -> 'request.devices[0]'."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or str(loc[0] if loc else "")


class LostNodeWatch(threading.Thread):
    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(name="xpupool-lost-nodes", daemon=True)
        self.plane = plane
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(max(self.plane.heartbeat_s / 2, 0.05)):
            try:
                mark_lost_nodes(self.plane)
            except Exception:
                log.exception("lost-node check failed")


def create_app(
    plane: ControlPlane,
    *,
    background: bool = True,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> FastAPI:
    """The app over ``plane``. ``background`` runs the scheduler and lost-node threads (tests of
    routers alone may turn them off and call ``schedule_pass`` themselves)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threads: list[SchedulerThread | LostNodeWatch] = []
        if background:
            threads = [SchedulerThread(plane), LostNodeWatch(plane)]
            for t in threads:
                t.start()
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            if on_stop is not None:
                on_stop()
            for t in threads:
                t.stop() if isinstance(t, SchedulerThread) else t.stopped.set()

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
    registry = make_registry(plane)
    for router in (tenants.router, jobs.router, fleet.router, agents.router):
        app.include_router(router)

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(_body(exc.field, exc.value, exc.reason), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid input"}
        body = _body(_loc(tuple(first.get("loc", ()))), first.get("input"), str(first.get("msg")))
        body["errors"] = [
            {"field": _loc(tuple(e.get("loc", ()))), "reason": str(e.get("msg"))} for e in errors
        ]
        return JSONResponse(body, status_code=422)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(_body(exc.kind, exc.name, str(exc)), status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(_body(None, None, str(exc)), status_code=409)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            _body(None, None, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )

    @app.get("/healthz", response_class=PlainTextResponse, tags=["ops"])
    def healthz() -> str:
        return "ok"

    @app.get("/metrics", tags=["ops"])
    def metrics() -> Response:
        """Prometheus exposition (names in the README)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
