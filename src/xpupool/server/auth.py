"""Bearer tokens: random secrets, stored only as SHA-256 hashes, each acting as one principal."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "tenant", "agent"]
TOKEN_PREFIX = "xpp_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the admin sees everything; a tenant only its own jobs and queues; an agent
    only the agent endpoints."""

    token_id: int
    role: Role
    tenant: str | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def new_token() -> str:
    """A fresh secret: 32 random bytes, URL-safe, with a prefix that secret scanners recognise."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the store keeps: a leaked database does not leak usable tokens."""
    return hashlib.sha256(token.encode()).hexdigest()
