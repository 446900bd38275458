"""Who calls a service through its proxy, as the proxy needs it wherever it runs: the caller, and
the digest of the bearer token that names it. Apart from ``service_access.py`` (which reads the
plane's books) so that the proxy process, which has no plane, carries none of it."""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.server.auth import token_hash

SERVICE_TOKEN_PREFIX = "xps_"
UNKNOWN = "unknown or revoked token"


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose request this is: ``tenant`` may reach any of its services, or only ``service``
    (a service token)."""

    tenant: str
    service: str | None
    token_id: int


def bearer(authorization: str | None) -> tuple[str, bool] | None:
    """The SHA-256 of an ``Authorization`` header's bearer token, and whether it is a service
    token (by its prefix); None without one. What the proxy process sends the plane: the digest,
    never the token."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token_hash(token), token.startswith(SERVICE_TOKEN_PREFIX)
