"""A service's proxy in the proxy process: the plane's proxy (``service_proxy.py``, the same ASGI
app) with what it asks answered here, so that a proxied request never waits for the plane's
event loop (its scheduling passes, its store writes, its other routes).

The worker polls the plane every :data:`POLL_S` on the submission channel (``wire.SNAPSHOT``,
answered by ``front/proxy_plane.py``) for every stored service, its state and its ready
endpoints, and
serves from the last answer. Bounds, while the plane answers: a replica that stops being ready
(or is drained) leaves the process's list within one poll interval plus the poll's round trip after
the plane's controller dropped it (a connection it refuses meanwhile is retried on the next
replica, as in the plane); a revoked token is refused within the same time, because the process
keeps a token only as long as the plane said yes to it in the last poll, or since that poll was
sent (:data:`wire.CALLER`, for a token it has not got). The traffic counted here goes to the
plane with each poll (``service_traffic.ProxyTraffic.report``), so the controller scales on it
one poll interval late at most.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xpupool.server.front.channel_client import ChannelClient, PlaneUnreachable
from xpupool.server.front.wire import CALLER, SNAPSHOT
from xpupool.server.service_caller import UNKNOWN, Caller, bearer
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_traffic import ProxyTraffic

log = logging.getLogger("xpupool.server")
POLL_S = 0.25
"""How often the process asks the plane for the services' endpoints and checks its tokens again."""
FIRST_SNAPSHOT_S = 10.0  # a request before the first answer waits this long for it (a start)
MAX_CACHED = 10_000  # tokens remembered, known and unknown; past it the cache starts again


class WorkerSource:
    """``service_proxy.ProxySource`` from the plane's snapshots, polled over ``channel``."""

    def __init__(self, channel: Path, traffic: ProxyTraffic, kind: str = "") -> None:
        self.client = ChannelClient(channel)
        self.traffic = traffic
        # the plane keeps each poller's latest counts by this name: unique per process and kind
        self.name = f"{kind}{os.getpid()}"
        self.services: dict[tuple[str, str], tuple[Endpoint, ...]] = {}
        self.states: dict[tuple[str, str], str] = {}  # every stored service's state
        self.loaded = asyncio.Event()
        self.live: dict[str, Caller] = {}  # tokens the plane said yes to lately, by digest
        self.fresh: dict[str, Caller] = {}  # ... of which, those asked since the poll was sent
        self.used: dict[str, bool] = {}  # digests accepted since the poll was sent: service?
        self.unknown: set[str] = set()  # digests the plane knows no live token of

    # ------------------------------------------------------------------ ProxySource
    async def who(self, authorization: str | None) -> Caller | tuple[int, str]:
        if not self.loaded.is_set():
            try:
                await asyncio.wait_for(self.loaded.wait(), FIRST_SNAPSHOT_S)
            except TimeoutError:
                return 503, "the control plane has not answered yet"
        found = bearer(authorization)
        if found is None:
            return 401, "missing bearer token"
        digest, service = found
        if digest in self.unknown:
            return 401, UNKNOWN
        caller = self.live.get(digest)
        if caller is None:
            body = json.dumps({"token": [digest, service]}).encode()
            try:
                answer = await self.client.ask({"op": CALLER}, body)
                checked = self._take(digest, json.loads(answer.body)["token"], self.fresh)
            except (PlaneUnreachable, KeyError, TypeError, ValueError) as exc:
                return 503, f"the control plane did not check the token: {exc}"
            if not isinstance(checked, Caller):
                return checked
            caller = checked
        self.used[digest] = service
        return caller

    def ready(self, tenant: str, name: str) -> Sequence[Endpoint]:
        return self.services.get((tenant, name), ())

    async def state(self, tenant: str, name: str) -> str | None:
        return self.states.get((tenant, name))

    # ------------------------------------------------------------------ the poll
    def _take(
        self, digest: str, checked: dict[str, list[Any]], into: dict[str, Caller]
    ) -> Caller | tuple[int, str]:
        """The plane's word on ``digest``, remembered (in ``live`` and ``into``)."""
        if "caller" in checked:
            tenant, service, token_id = checked["caller"]
            caller = Caller(str(tenant), None if service is None else str(service), int(token_id))
            for book in (self.live, into):
                if len(book) >= MAX_CACHED:
                    book.clear()
                book[digest] = caller
            return caller
        status, reason = checked["refused"]
        self.live.pop(digest, None)
        if reason == UNKNOWN:  # revoked or never issued: it stays so
            if len(self.unknown) >= MAX_CACHED:
                self.unknown.clear()
            self.unknown.add(digest)
        return int(status), str(reason)

    async def poll(self) -> None:
        """One snapshot: send the counts and the tokens used, take the endpoints and the
        tokens' checks. Only tokens the plane said yes to since the last poll was sent stay."""
        used, self.used = self.used, {}
        self.fresh = {}
        ask = {
            "worker": self.name,
            "tokens": [[d, s] for d, s in used.items()],
            "traffic": self.traffic.report(),
        }
        answer = await self.client.ask({"op": SNAPSHOT}, json.dumps(ask).encode())
        got = json.loads(answer.body)
        self.services = {
            (str(t), str(n)): tuple(Endpoint(int(j), int(r), str(h), int(p)) for j, r, h, p in e)
            for t, n, e, _ in got["services"]
        }
        self.states = {(str(t), str(n)): str(state) for t, n, _, state in got["services"]}
        self.traffic.keep_only(self.states)  # a deleted service's counts go here too
        live: dict[str, Caller] = dict(self.fresh)
        self.live = live
        for digest, checked in got["tokens"]:
            self._take(str(digest), checked, live)
        self.live = live
        self.loaded.set()

    async def run(self) -> None:
        """Poll until cancelled; a failed poll keeps the last snapshot and is said once."""
        failing = False
        while True:
            try:
                await self.poll()
                failing = False
            except (PlaneUnreachable, KeyError, TypeError, ValueError) as exc:
                if not failing:
                    log.warning("service proxy: the plane's snapshot failed: %s", exc)
                failing = True
            await asyncio.sleep(POLL_S)

    def close(self) -> None:
        self.client.close()
