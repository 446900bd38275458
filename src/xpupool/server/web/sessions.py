"""Dashboard sign-in sessions and CSRF: why a browser never holds the token.

Signing in with a token (the API's tokens, ``server/auth.py``) makes a server-side session: a
random id, the only thing in the cookie (HttpOnly, SameSite=Strict, Secure over TLS), mapped here
to the token's SHA-256 (never the token) and to a per-session CSRF secret. Every request reads the
token's row again through that hash, so a revoked or expired token ends its sessions at once.
Sessions live in memory: a server restart signs everybody out, which is the safe failure. A
state-changing form must carry the session's CSRF secret *and* come from this origin (Origin, or
Referer when a browser sends no Origin); either missing is a refusal (403).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from xpupool.server.auth import Principal, TokenExpired, token_hash
from xpupool.server.plane import ControlPlane
from xpupool.server.services import tenants

COOKIE = "xpupool_session"
SESSION_TTL_S = 12 * 3600.0  # absolute: a session is not kept alive by use past this
MAX_SESSIONS = 10_000  # the oldest goes first: sign-ins cannot grow memory without bound
MAX_TOKEN_CHARS = 200  # a real token is ~47 characters; more is not even hashed


class SignInNeeded(Exception):  # noqa: N818 - a redirect, not a bug
    """No (live) session: pages answer with a redirect to /signin, fragments with 401."""


class CsrfRefused(Exception):  # noqa: N818 - an answer (403), not a bug
    """A state-changing request without this session's CSRF secret or from another origin."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in browser: ``digest`` is the token's SHA-256 (what the store keys tokens by),
    ``csrf`` the secret its forms carry, ``created`` monotonic seconds."""

    sid: str
    digest: str
    csrf: str
    created: float


class SessionStore:
    """Sessions by id, bounded in number and age; thread-safe (routes run on a thread pool)."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, max_sessions: int = MAX_SESSIONS) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, token: str) -> Session:
        """A new session for ``token`` (already authenticated by the caller)."""
        session = Session(
            secrets.token_urlsafe(32),
            token_hash(token),
            secrets.token_urlsafe(32),
            time.monotonic(),
        )
        with self._lock:
            self._by_id[session.sid] = session
            while len(self._by_id) > self.max_sessions:
                self._by_id.popitem(last=False)
        return session

    def get(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and time.monotonic() - session.created > self.ttl_s:
                del self._by_id[sid]
                return None
            return session

    def close(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)


def live_principal(plane: ControlPlane, digest: str) -> Principal | None:
    """The principal of the token whose hash is ``digest`` if it is still live (not revoked,
    not expired) and may use the dashboard (admin or tenant); None otherwise."""
    try:
        who = tenants.principal_of(plane, digest)
    except TokenExpired:
        return None
    if who is None or who.role not in ("admin", "tenant"):
        return None
    return who


def same_origin(request: Request) -> bool:
    """True when the request says it comes from a page of this server: its Origin header, or
    (no Origin) its Referer, names this scheme, host and port. Neither header: False."""
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == here
    referer = request.headers.get("referer")
    if referer is None:
        return False
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" == here


def check_csrf(request: Request, session: Session, sent: str | None) -> None:
    """Raise :class:`CsrfRefused` unless ``sent`` is the session's CSRF secret and the request
    comes from this origin."""
    if not same_origin(request):
        raise CsrfRefused("cross-site request refused: Origin/Referer is not this server")
    if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")
