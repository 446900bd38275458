"""The plane's answers to the proxy process (``front/proxy_source.py`` is its end), on the
channel (``front/plane_side.py``):

- :data:`wire.SNAPSHOT`, every ``proxy_source.POLL_S`` from the process: its traffic
  counts (taken into ``plane.service_traffic``, which the controller scales on) and the digests
  of the tokens it accepted since its last poll; answered with every stored service, its state
  and its ready endpoints, and each of those tokens checked again (a revoked one is refused).
- :data:`wire.CALLER`: a token the process has not seen (or not lately), checked as the plane's
  own proxy checks it (``service_access.caller_of``).

Tokens go as SHA-256 digests, never as themselves. The store is read once per snapshot (the
services' names, off the event loop) and, for a token no cache holds, once per token.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from xpupool.server.front.wire import CALLER, SNAPSHOT, FrameError
from xpupool.server.plane import ControlPlane, service_rows
from xpupool.server.service_access import Caller, ServiceTokenCache, caller_of
from xpupool.server.service_traffic import ReportError
from xpupool.server.store_off_loop import on_store

DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_TOKENS = 10_000  # digests one poll may ask about (the process's cache holds as many at most)


class ProxyAnswers:
    """Answers :data:`SNAPSHOT` and :data:`CALLER` frames for ``plane`` with the token cache of
    the plane's own proxy (``tokens``: the one the revoke route empties)."""

    def __init__(self, plane: ControlPlane, tokens: ServiceTokenCache) -> None:
        self.plane = plane
        self.tokens = tokens

    async def answer(self, op: str, body: bytes) -> bytes:
        try:
            asked = json.loads(body)
        except ValueError as exc:
            raise FrameError(f"{op}: body is not JSON: {exc}") from None
        if not isinstance(asked, dict):
            raise FrameError(f"{op}: body is not a JSON object")
        if op == CALLER:  # a token not cached is read from the store: off the loop on PostgreSQL
            token = await on_store(self.plane, self._token, asked.get("token"))
            return json.dumps({"token": token}).encode()
        assert op == SNAPSHOT
        worker, tokens = asked.get("worker"), asked.get("tokens")
        if not isinstance(worker, str) or not isinstance(tokens, list) or len(tokens) > MAX_TOKENS:
            raise FrameError("snapshot: a worker name and a list of tokens are needed")
        for (
            token
        ) in tokens:  # all checked before anything is taken: a refused frame changes nothing
            _digest(token)
        names = await asyncio.to_thread(self._names)
        try:
            known = {(tenant, name) for tenant, name, _ in names}
            self.plane.service_traffic.take(worker, asked.get("traffic"), known)
        except ReportError as exc:
            raise FrameError(str(exc)) from None
        checked = await on_store(self.plane, lambda: [[t[0], self._token(t)] for t in tokens])
        ready = self.plane.service_endpoints.ready
        services = [
            [
                tenant,
                name,
                [[e.job_id, e.replica, e.host, e.port] for e in ready(tenant, name)],
                state,
            ]
            for tenant, name, state in names
        ]
        return json.dumps({"services": services, "tokens": checked}).encode()

    def _token(self, asked: Any) -> dict[str, list[Any]]:
        """``asked`` ([digest, is a service token]) checked: ``{"caller": [tenant, service,
        token id]}`` or ``{"refused": [status, reason]}``."""
        digest, service = _digest(asked)
        found = caller_of(self.plane, self.tokens, digest, service)
        if isinstance(found, Caller):
            return {"caller": [found.tenant, found.service, found.token_id]}
        return {"refused": list(found)}

    def _names(self) -> list[tuple[str, str, str]]:
        with self.plane.db.connect() as conn:
            return [(r["tenant"], r["name"], r["state"]) for r in service_rows.listed(conn)]


def _digest(asked: Any) -> tuple[str, bool]:
    """A token as the process asks it: [SHA-256 hex digest, is a service token]."""
    if not (
        isinstance(asked, list)
        and len(asked) == 2
        and isinstance(asked[0], str)
        and DIGEST.fullmatch(asked[0])
        and isinstance(asked[1], bool)
    ):
        raise FrameError("a token is asked as [SHA-256 hex digest, is a service token]")
    return asked[0], asked[1]
