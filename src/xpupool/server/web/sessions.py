"""Dashboard sign-in sessions and CSRF: why a browser never holds the token.

Signing in with a token (the API's tokens, ``server/auth.py``) makes a server-side session: a
random id, the only thing in the cookie (HttpOnly, SameSite=Strict, Secure over TLS), mapped here
to the token's SHA-256 (never the token) and to a per-session CSRF secret. Every request reads the
token's row again through that hash, so a revoked or expired token ends its sessions at once.
Sessions are kept in the store (``storage/web_sessions.py``, by the id's SHA-256, never the id)
and cached in memory: a restarted plane, or a standby that took over (``server/standby.py``),
knows every browser signed in before, so a take-over signs nobody out. The CSRF secret is derived
from the session id (an HMAC), so the store holds nothing a forged form could use. A
state-changing form must carry the session's CSRF secret *and* come from this origin (Origin, or
Referer when a browser sends no Origin); either missing is a refusal (403).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from xpupool.server.auth import Principal, TokenExpired, token_hash
from xpupool.server.plane import ControlPlane, web_session_rows
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
    ``csrf`` the secret its forms carry, ``created`` Unix seconds (a plane that took over judges
    the session's age too)."""

    sid: str
    digest: str
    csrf: str
    created: float


def sid_hash(sid: str) -> str:
    """What the store keys a session by: the id's SHA-256, so that the store holds no cookie."""
    return hashlib.sha256(sid.encode()).hexdigest()


def csrf_of(sid: str) -> str:
    """The session's CSRF secret, derived from its id: whoever holds the id holds the session
    anyway; a page of another site holds neither."""
    return hmac.new(sid.encode(), b"xpupool dashboard csrf", hashlib.sha256).hexdigest()


class SessionStore:
    """Sessions by id, bounded in number and age; thread-safe (routes run on a thread pool).
    ``plane``: kept in its store too (a take-over keeps them); None: in memory only."""

    def __init__(
        self,
        plane: ControlPlane | None = None,
        ttl_s: float = SESSION_TTL_S,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.plane = plane
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        # Unix time, the plane's (what its rows are stamped with) unless given
        self.clock = clock or (plane.clock if plane is not None else time.time)
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, token: str) -> Session:
        """A new session for ``token`` (already authenticated by the caller), stored before it
        is handed out: a store that cannot write raises (503) and signs nobody in."""
        sid = secrets.token_urlsafe(32)
        session = Session(sid, token_hash(token), csrf_of(sid), self.clock())
        if self.plane is not None:
            web_session_rows.add(
                self.plane,
                sid_hash(sid),
                session.digest,
                session.created,
                expired_before=session.created - self.ttl_s,
                keep=self.max_sessions,
            )
        self._remember(session)
        return session

    def _remember(self, session: Session) -> None:
        with self._lock:
            self._by_id[session.sid] = session
            while len(self._by_id) > self.max_sessions:
                self._by_id.popitem(last=False)

    def cached(self, sid: str | None) -> Session | None:
        """The session from memory alone, age unchecked: for the rate limiter, which runs on the
        event loop and must not wait for the store (a session not cached yet is limited by
        address until its first page loads it)."""
        if not sid:
            return None
        with self._lock:
            return self._by_id.get(sid)

    def get(self, sid: str | None) -> Session | None:
        """The live session of ``sid``: from memory, else from the store (signed in to the plane
        this one took over from); an expired one is dropped."""
        if not sid or len(sid) > 100:
            return None
        session = self.cached(sid)
        if session is None and self.plane is not None:
            found = web_session_rows.find(self.plane, sid_hash(sid))
            if found is not None:
                session = Session(sid, found[0], csrf_of(sid), found[1])
                self._remember(session)
        if session is not None and self.clock() - session.created > self.ttl_s:
            self.close(sid)
            return None
        return session

    def close(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)
        if self.plane is not None:
            web_session_rows.remove(self.plane, sid_hash(sid))


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
