"""Dashboard sign-in sessions (``server/web/sessions.py``), kept in the store so that a standby
plane that takes over (``server/standby.py``) knows every browser signed in to the one it
replaced. Keyed by the SHA-256 of the session id, never the id: a leaked database or backup
holds no cookie that works, as it holds no token (``tokens.hash``)."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, String, Table

from xpupool.server.storage.meta import metadata

web_sessions = Table(
    "web_sessions",
    metadata,
    Column("sid_hash", String(64), primary_key=True),  # SHA-256 of the cookie's session id
    Column("digest", String(64), nullable=False),  # the signed-in token's hash (tokens.hash)
    Column("created_at", Float, nullable=False),  # Unix time: the session's age ends it
    Index("ix_web_sessions_created", "created_at"),
)
