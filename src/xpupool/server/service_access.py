"""Who may call a service through its proxy: the owning tenant's API token, or a service token
the tenant issued for that one service (``routers/service_tokens.py``).

Every proxied request is checked, so neither check reads the store once a token is known: API
tokens through the plane's principal cache (``services/tenants.py``), service tokens through
:class:`ServiceTokenCache`. Revoking a service token drops it from the cache of the plane, so the
plane's next check of it refuses it: at once for the plane's own proxy; the proxy process
(``front/proxy_source.py``) has every token it used checked again by the plane with each of its
snapshot polls, so a revoked token stops there within one poll interval.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence

from xpupool.server.auth import TokenExpired
from xpupool.server.plane import ControlPlane, service_rows
from xpupool.server.plane import service_token_rows as rows
from xpupool.server.service_caller import SERVICE_TOKEN_PREFIX, UNKNOWN, Caller, bearer
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.services import tenants
from xpupool.server.store_off_loop import on_store

__all__ = ["SERVICE_TOKEN_PREFIX", "Caller", "PlaneSource", "ServiceTokenCache", "caller"]

MAX_CACHED = 10_000  # tokens remembered; past it the cache starts again (a flood of new tokens)


def new_service_token() -> str:
    """A fresh secret, told apart from an API token by its prefix (one store lookup, not two)."""
    return SERVICE_TOKEN_PREFIX + secrets.token_urlsafe(32)


class ServiceTokenCache:
    """Live service tokens by hash: (id, tenant, service); and the hashes of tokens found
    unknown, so that a caller retrying a wrong token costs no store read each time (a token
    is random: none is presented before it is issued)."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[int, str, str]] = {}
        self.unknown: set[str] = set()

    def remember_unknown(self, digest: str) -> None:
        if len(self.unknown) >= MAX_CACHED:
            self.unknown.clear()
        self.unknown.add(digest)

    def get(self, plane: ControlPlane, digest: str) -> tuple[int, str, str] | None:
        found = self._live.get(digest)
        if found is None:
            found = rows.live(plane, digest)
            if found is not None:
                if len(self._live) >= MAX_CACHED:
                    self._live.clear()
                self._live[digest] = found
        return found

    def forget(self, token_id: int) -> None:
        """Drop token ``token_id`` (revoked): its next request reads the store, and is refused."""
        for digest, (tid, _, _) in list(self._live.items()):
            if tid == token_id:
                del self._live[digest]


def caller(
    plane: ControlPlane, cache: ServiceTokenCache, authorization: str | None
) -> Caller | tuple[int, str]:
    """The caller of an ``Authorization`` header's bearer token, or the status and reason it is
    refused with: 401 for no, an unknown, a revoked or an expired token; 403 for a token of
    another role (the admin's included: a proxy path names no tenant, and the admin's requests
    are audited, which a service's traffic must not be)."""
    found = bearer(authorization)
    if found is None:
        return 401, "missing bearer token"
    return caller_of(plane, cache, *found)


def caller_of(
    plane: ControlPlane, cache: ServiceTokenCache, digest: str, service_token: bool
) -> Caller | tuple[int, str]:
    """:func:`caller` for the token whose SHA-256 is ``digest``."""
    if digest in cache.unknown:
        return 401, UNKNOWN
    if service_token:
        found = cache.get(plane, digest)
        if found is None:
            cache.remember_unknown(digest)
            return 401, UNKNOWN
        return Caller(found[1], found[2], found[0])
    try:
        who = tenants.principal_of(plane, digest)
    except TokenExpired:
        return 401, "token expired"
    if who is None:
        cache.remember_unknown(digest)
        return 401, UNKNOWN
    if who.role != "tenant" or who.tenant is None:
        return 403, f"a {who.role} token does not call services: the owning tenant's does"
    return Caller(who.tenant, None, who.token_id)


class PlaneSource:
    """What the proxy asks (``service_proxy.ProxySource``), answered from the plane's own books:
    its token caches, its endpoints (the service controller's), and the store for a name with no
    ready endpoint."""

    def __init__(self, plane: ControlPlane, tokens: ServiceTokenCache) -> None:
        self.plane = plane
        self.tokens = tokens

    async def who(self, authorization: str | None) -> Caller | tuple[int, str]:
        # a token not cached is read from the store: off the loop on PostgreSQL (issue 50)
        return await on_store(self.plane, caller, self.plane, self.tokens, authorization)

    def ready(self, tenant: str, name: str) -> Sequence[Endpoint]:
        return self.plane.service_endpoints.ready(tenant, name)

    async def state(self, tenant: str, name: str) -> str | None:
        return await asyncio.to_thread(self._stored, tenant, name)

    def _stored(self, tenant: str, name: str) -> str | None:
        with self.plane.db.connect() as conn:
            row = service_rows.get(conn, tenant, name)
        return None if row is None else str(row["state"])
