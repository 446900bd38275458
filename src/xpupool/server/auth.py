"""Bearer tokens: random secrets, stored only as SHA-256 hashes, each acting as one principal."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

from xpupool.server.schemas.agent_protocol import BOOTSTRAP_TOKEN_PREFIX

Role = Literal["admin", "tenant", "agent", "bootstrap", "metrics"]
TOKEN_PREFIX = "xpp_"
AGENT_ROLES = frozenset({"agent", "bootstrap"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the admin sees everything; a tenant only its own jobs and queues; an agent
    only the agent endpoints, for the nodes in ``nodes``; a bootstrap token only registers one new
    node; a metrics token only reads ``/metrics`` (docs/security.md).

    ``nodes``: for an agent, the nodes it speaks for (one for a token; the in-process agent's
    hosted nodes); for a bootstrap token, the one name it may register; None = not bound yet (a
    token from before node binding, or a bootstrap token for any new name). ``expires_at``: Unix
    time after which the token is refused, None = never. ``token_id`` 0 is the in-process agent,
    which has no token."""

    token_id: int
    role: Role
    tenant: str | None
    nodes: frozenset[str] | None = None
    expires_at: float | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def node(self) -> str | None:
        """The bound node as one string (several joined by ','), for messages and the audit."""
        return None if self.nodes is None else ",".join(sorted(self.nodes))


class TokenExpired(Exception):  # noqa: N818 - an answer, not a bug: 401 like a revoked token
    """The token is known but past its expiry (``expires_at``, Unix time)."""

    def __init__(self, expires_at: float) -> None:
        self.expires_at = expires_at
        super().__init__(f"token expired at {expires_at:.0f}")


def new_token(bootstrap: bool = False) -> str:
    """A fresh secret: 32 random bytes, URL-safe, with a prefix that secret scanners recognise
    (and that tells an agent it holds a bootstrap token)."""
    return (BOOTSTRAP_TOKEN_PREFIX if bootstrap else TOKEN_PREFIX) + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the store keeps: a leaked database does not leak usable tokens."""
    return hashlib.sha256(token.encode()).hexdigest()
