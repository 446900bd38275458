"""The audit rows of HTTP requests, written by one ASGI middleware so that no route can forget.

Which requests make a row (:func:`audited`): every admin request that changes something (any
method but GET/HEAD/OPTIONS, less the routes marked :func:`changes_nothing`), every agent
registration, and every agent or bootstrap request that was refused (4xx/5xx), refusals aggregated
per credential and source (``server/audit.py``); successful heartbeats and log uploads are
counted, not written. The caller
is what ``routers/deps.py`` authenticated (``scope["state"]["principal"]``); a request refused
before that (no or unknown token, 401) has no principal and makes no row, so unauthenticated
noise cannot fill the log. The row is written before the answer's last byte is sent: a client
that has its answer finds the row.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from xpupool.model.errors import Unavailable
from xpupool.server.auth import AGENT_ROLES, Principal
from xpupool.server.client_address import client_address
from xpupool.server.plane import ControlPlane

log = logging.getLogger("xpupool.server")
COUNTED = frozenset({"heartbeat", "append_log"})
READS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY_READ = 8192
_NOTHING = "_audit_changes_nothing"
Route = TypeVar("Route", bound=Callable[..., Any])


def changes_nothing(route: Route) -> Route:
    """Mark ``route`` as a POST that changes nothing, audited as a read: the dashboard's submit
    form checks itself as you type with a POST (its text, environment values included, stays out
    of URLs), and an admin typing must not write a row per keystroke."""
    setattr(route, _NOTHING, True)
    return route


def audited(
    who: Principal | None, action: str, method: str, status: int, *, reads: bool = False
) -> bool:
    """True if this request gets an audit row (see the module docstring); ``reads``: its route
    is marked :func:`changes_nothing`."""
    if who is None:
        return False
    if action in COUNTED and status < 400:
        return False
    if who.is_admin:
        return method not in READS and not reads
    if who.role in AGENT_ROLES:
        return action == "register" or status >= 400
    return False


def audit_reason(status: int, body: bytes) -> str:
    """The audit row's reason for an answer: 'ok', or the error body's field and reason."""
    if status < 400:
        return "ok"
    try:
        data = json.loads(body)
    except ValueError:
        return f"{status}"
    if not isinstance(data, dict):
        return f"{status}"
    reason = str(data.get("reason", ""))
    field = data.get("field")
    return f"{field}: {reason}" if field else reason


def submit_target(tenant: str | None, job_id: int | None = None) -> str:
    """An audited submission's target: the job once it is stored, the tenant it was asked for
    when it was refused."""
    if job_id is not None:
        return f"job {job_id} of tenant {tenant}"
    return f"new job of tenant {tenant}"


def _target(scope: Scope, state: dict[str, Any]) -> str:
    given = state.get("audit_target")
    if given:
        return str(given)
    params = scope.get("path_params") or {}
    if params:
        return ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{scope.get('method', '')} {scope.get('path', '')}"


class AuditMiddleware:
    """A row for each audited request; its ``source`` is the client's address
    (``client_address.py``)."""

    def __init__(self, app: ASGIApp, plane: ControlPlane) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        status = 0
        body = bytearray()

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                if status >= 400 and len(body) < MAX_BODY_READ:
                    body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    await self._record(scope, state, status, bytes(body))
            await send(message)

        await self.app(scope, receive, capture)

    async def _record(self, scope: Scope, state: dict[str, Any], status: int, body: bytes) -> None:
        who = state.get("principal")
        endpoint = scope.get("endpoint")
        action = getattr(endpoint, "__name__", None) or str(scope.get("path", ""))
        reads = getattr(endpoint, _NOTHING, False)
        if not audited(who, action, str(scope.get("method", "")), status, reads=reads):
            return
        await write_row(
            self.plane, who, action, _target(scope, state), status, body, client_address(scope)
        )


async def write_row(
    plane: ControlPlane,
    who: Principal | None,
    action: str,
    target: str,
    status: int,
    body: bytes,
    source: str | None,
) -> None:
    """The audit row of one answered request (``body``: the answer's, for a refusal's reason),
    off the event loop."""
    write = partial(
        plane.audit.record, who, action, target, status, audit_reason(status, body), source=source
    )
    try:
        await anyio.to_thread.run_sync(write)
    except Unavailable:
        pass  # the store cannot be written: its health said so once (server/health.py)
    except Exception:  # the answer still goes out; the store's health says why (logged)
        log.exception("audit row for %s not written", action)
