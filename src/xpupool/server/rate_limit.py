"""Requests per credential and per source address: token buckets in front of every route.

A credential (a token, or a dashboard session, which acts as its token) may send ``RATE``
requests a second on average and ``BURST`` at once (``xpupool up --rate-limit RATE/BURST``). A
request that carries no valid credential (none, or an unknown, revoked or expired token) counts
against its source address instead (``--address-rate-limit``). Over either, the answer is 429
with ``Retry-After`` (whole seconds) and a JSON body naming the limit and the option that sets
it, and nothing behind it runs: no route, no audit row. Refused requests (401, 403) count like
any other: a refusal costs the server a request too. Past its address's limit, a token the plane
has not seen is refused before the store is asked about it, so guessing tokens costs the store
nothing.

Counted in the plane's process, in front of its app (:class:`RateLimitGate`), with one
:class:`RateLimiter`.

Memory is bounded: a bucket per key, ``MAX_KEYS`` at most of each kind, the least recently used
dropped first (it is full or nearly, or its owner has been quiet the longest). Keys are token
ids and addresses, an IPv6 address by its /64 (what one host is given); never a token.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.exc import OperationalError
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from xpupool.model.errors import Unavailable
from xpupool.server.auth import Principal, TokenExpired, token_hash
from xpupool.server.client_address import address_key, client_address, header
from xpupool.server.error_answers import ErrorAnswer, error_answer, error_body
from xpupool.server.front.wire import render
from xpupool.server.plane import ControlPlane
from xpupool.server.services import tenants
from xpupool.server.store_off_loop import on_store, unreachable_answer
from xpupool.server.web.sessions import COOKIE, SessionStore

MAX_KEYS = 100_000  # buckets kept per kind (tokens, addresses): a few MiB at most
MAX_TOKEN_CHARS = 200  # a real token is ~47 characters; a longer one is no token (not hashed)


@dataclass(frozen=True, slots=True)
class Rate:
    """``per_s`` requests a second on average, ``burst`` at once; ``per_s`` 0 = no limit."""

    per_s: float
    burst: int

    @property
    def off(self) -> bool:
        return self.per_s <= 0

    def __str__(self) -> str:
        return "no limit" if self.off else f"{self.per_s:g}/s, {self.burst} at once"


TOKEN_RATE = Rate(50.0, 200)
"""Default per credential: far above an agent (a heartbeat and a log upload per replica every
few seconds) or a dashboard (a few fragments every 2 s), far below what one client can send in a
loop of refused calls (issue 43)."""
ADDRESS_RATE = Rate(10.0, 50)
"""Default per address, for requests with no valid credential: probes, a sign-in page and its
files, /healthz; not a token-guessing loop."""


def parse_rate(text: str) -> Rate:
    """``RATE[/BURST]``: requests a second and how many at once (default: 4 s worth, at least 1);
    ``0`` = no limit. Raises ValueError naming the text."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*(\d+)\s*)?", text)
    if found is None:
        raise ValueError(f"{text!r}: use RATE or RATE/BURST, e.g. 50/200 (0: no limit)")
    per_s = float(found.group(1))
    if per_s == 0:
        return Rate(0.0, 0)
    burst = int(found.group(2)) if found.group(2) else max(1, math.ceil(4 * per_s))
    if burst < 1:
        raise ValueError(f"{text!r}: BURST must be at least 1")
    return Rate(per_s, burst)


class Buckets:
    """Token buckets by key, at most ``max_keys``, least recently used dropped first. A key never
    seen has a full bucket."""

    def __init__(self, rate: Rate, max_keys: int = MAX_KEYS) -> None:
        self.rate = rate
        self.max_keys = max_keys
        self._levels: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # (level, at)

    def _level(self, key: Hashable, now: float) -> float:
        found = self._levels.get(key)
        if found is None:
            return float(self.rate.burst)
        level, at = found
        return min(float(self.rate.burst), level + max(0.0, now - at) * self.rate.per_s)

    def wait_s(self, key: Hashable, now: float) -> float:
        """Seconds until ``key`` may send one request (0: now), taking nothing."""
        return max(0.0, (1.0 - self._level(key, now)) / self.rate.per_s)

    def take(self, key: Hashable, now: float) -> float:
        """Take one request's worth: 0 when taken, else the seconds until one is there."""
        level = self._level(key, now)
        taken = level >= 1.0
        self._levels[key] = (level - 1.0 if taken else level, now)
        self._levels.move_to_end(key)
        if len(self._levels) > self.max_keys:
            self._levels.popitem(last=False)
        return 0.0 if taken else (1.0 - level) / self.rate.per_s

    def __len__(self) -> int:
        return len(self._levels)


class RateLimiter:
    """The plane's limits per credential and per address. Used on the plane's event loop only
    (the gate and the submission channel both run there): no lock."""

    def __init__(
        self,
        plane: ControlPlane,
        token: Rate = TOKEN_RATE,
        address: Rate = ADDRESS_RATE,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.plane = plane
        self.tokens = None if token.off else Buckets(token, max_keys)
        self.addresses = None if address.off else Buckets(address, max_keys)
        self.clock = clock
        self.refused: Counter[str] = Counter()  # by limit: "token", "address"

    @property
    def off(self) -> bool:
        return self.tokens is None and self.addresses is None

    def admit(
        self,
        digest: str | None,
        address: str | None,
        stored: Callable[[str], Principal | None] | None = None,
    ) -> ErrorAnswer | None:
        """None when a request with the token whose SHA-256 is ``digest`` (None: no token), from
        ``address`` (None: unknown), may go on; else the 429 to answer. Either way it is
        counted. ``stored``: the principal of a token not cached, as read from the store
        (default: read here; :meth:`admit_off_loop` reads it first, off the loop on PostgreSQL)."""
        now = self.clock()
        if digest is not None:
            who = self._principal(digest, store=False)
            if who is None and self.addresses is not None:
                wait = self.addresses.wait_s(address_key(address), now)
                if wait > 0:  # a token not seen yet, from an address over its limit
                    return self._refuse("address", wait)
                who = (stored or self.stored_principal)(digest)
            if who is not None:
                return self._take_token(who.token_id, now)
        if self.addresses is None:
            return None
        wait = self.addresses.take(address_key(address), now)
        return None if wait == 0 else self._refuse("address", wait)

    async def admit_off_loop(self, digest: str | None, address: str | None) -> ErrorAnswer | None:
        """:meth:`admit` from the event loop: a token not cached is read from the store first,
        on PostgreSQL on a thread (``store_off_loop.py``, issue 50); a store that does not
        answer is a 503, not an error of the app."""
        try:
            if not self.reads_store(digest, address):
                return self.admit(digest, address)
            assert digest is not None
            who = await on_store(self.plane, self.stored_principal, digest)
            return self.admit(digest, address, stored=lambda _: who)
        except Unavailable as exc:  # the store stalled (plane/store_stall.py): 503
            answer = error_answer(exc)
            assert answer is not None
            return answer
        except OperationalError as exc:
            return unreachable_answer(exc)

    def reads_store(self, digest: str | None, address: str | None) -> bool:
        """Whether :meth:`admit` reads the store for this request: a token not cached, from an
        address under its limit."""
        if digest is None or self.addresses is None:
            return False
        if self._principal(digest, store=False) is not None:
            return False
        return self.addresses.wait_s(address_key(address), self.clock()) == 0

    def stored_principal(self, digest: str) -> Principal | None:
        """The principal of ``digest`` read from the store (cached when live)."""
        return self._principal(digest, store=True)

    def _principal(self, digest: str, *, store: bool) -> Principal | None:
        try:
            return tenants.principal_of(self.plane, digest, store=store)
        except TokenExpired:
            return None

    def _take_token(self, token_id: int, now: float) -> ErrorAnswer | None:
        if self.tokens is None:
            return None
        wait = self.tokens.take(token_id, now)
        return None if wait == 0 else self._refuse("token", wait)

    def _refuse(self, limit: str, wait_s: float) -> ErrorAnswer:
        self.refused[limit] += 1
        buckets = self.tokens if limit == "token" else self.addresses
        assert buckets is not None
        retry = max(1, math.ceil(wait_s))
        if limit == "token":
            said = f"{buckets.rate} per token (xpupool up --rate-limit)"
        else:
            said = (
                f"{buckets.rate} per address for requests without a valid token "
                "(xpupool up --address-rate-limit)"
            )
        reason = f"over the rate limit of {said}: try again in {retry} s"
        return ErrorAnswer(429, error_body(limit, None, reason), {"Retry-After": str(retry)})


def bearer_digest(authorization: str | None) -> str | None:
    """The SHA-256 of an ``Authorization: Bearer`` header's token, as the store keys tokens;
    None without one (or for a value too long to be a token)."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not authorization or scheme.lower() != "bearer" or not credentials:
        return None
    if len(credentials) > MAX_TOKEN_CHARS:
        return None
    return token_hash(credentials)


def _session_digest(scope: Scope) -> str | None:
    """The token hash behind the dashboard session whose id the request's cookie carries."""
    cookie = header(scope, b"cookie")
    sessions = getattr(getattr(scope.get("app"), "state", None), "web_sessions", None)
    if cookie is None or not isinstance(sessions, SessionStore):
        return None
    session = sessions.cached(cookie_parser(cookie).get(COOKIE))
    return None if session is None else session.digest


class RateLimitGate:
    """ASGI middleware: every HTTP request through :meth:`RateLimiter.admit` before the app."""

    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.limiter.off:
            await self.app(scope, receive, send)
            return
        digest = bearer_digest(header(scope, b"authorization")) or _session_digest(scope)
        refused = await self.limiter.admit_off_loop(digest, client_address(scope))
        if refused is None:
            await self.app(scope, receive, send)
            return
        body = render(refused.body)
        headers = [(k.lower().encode(), v.encode()) for k, v in refused.headers.items()]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": refused.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
