"""Per-service tokens on the wire (``/v1/services/NAME/tokens``): the secret goes out once."""

from __future__ import annotations

from pydantic import Field

from xpupool.server.schemas.base import Lenient, Name, Strict


class ServiceTokenIn(Strict):
    """A service token to issue."""

    name: Name | None = Field(None, description="Your label for it (who holds it).")


class ServiceToken(Lenient):
    """A service token as listed; ``token`` is its secret, in the answer that issues it only."""

    id: int
    tenant: str
    service: str
    name: str | None = None
    created_at: float
    revoked: bool
    token: str | None = None
