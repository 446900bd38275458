"""Who may call a service through its proxy: the owning tenant's API token, or a service token
the tenant issued for that one service (``routers/service_tokens.py``).

Every proxied request is checked, so neither check reads the store once a token is known: API
tokens through the plane's principal cache (``services/tenants.py``), service tokens through
:class:`ServiceTokenCache`. Revoking a service token drops it from the cache in the same process
that serves the proxy (the plane's; the HTTP workers pass proxied requests to it), so the next
request with it is refused: revocation is immediate, with no time-to-live to wait out.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from xpupool.server.auth import TokenExpired, token_hash
from xpupool.server.plane import ControlPlane
from xpupool.server.plane import service_token_rows as rows
from xpupool.server.services import tenants

SERVICE_TOKEN_PREFIX = "xps_"
MAX_CACHED = 10_000  # tokens remembered; past it the cache starts again (a flood of new tokens)


def new_service_token() -> str:
    """A fresh secret, told apart from an API token by its prefix (one store lookup, not two)."""
    return SERVICE_TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose request this is: ``tenant`` may reach any of its services, or only ``service``
    (a service token)."""

    tenant: str
    service: str | None
    token_id: int


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
    if authorization is None:
        return 401, "missing bearer token"
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return 401, "missing bearer token"
    digest = token_hash(token)
    if digest in cache.unknown:
        return 401, "unknown or revoked token"
    if token.startswith(SERVICE_TOKEN_PREFIX):
        found = cache.get(plane, digest)
        if found is None:
            cache.remember_unknown(digest)
            return 401, "unknown or revoked token"
        return Caller(found[1], found[2], found[0])
    try:
        who = tenants.principal_of(plane, digest)
    except TokenExpired:
        return 401, "token expired"
    if who is None:
        cache.remember_unknown(digest)
        return 401, "unknown or revoked token"
    if who.role != "tenant" or who.tenant is None:
        return 403, f"a {who.role} token does not call services: the owning tenant's does"
    return Caller(who.tenant, None, who.token_id)
