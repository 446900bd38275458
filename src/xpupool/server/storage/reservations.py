"""Reservations the admin makes (``schemas/reservations.py``): cards held for a tenant, or one of
its jobs by name, in a time window (``engine/cycle/reservations.py`` keeps the rules)."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, String, Table

from xpupool.server.storage.meta import metadata

reservations = Table(
    "reservations",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("tenant", String(63), nullable=False),
    Column("job", String(200), nullable=True),  # null: any job of the tenant
    Column("cards", String(100), nullable=False),  # as asked: "A100x4", "4"
    Column("site", String(63), nullable=True),
    Column("start_at", Float, nullable=False),  # Unix time the window begins
    Column("end_at", Float, nullable=False),
    Column("devices", JSON, nullable=False),  # the UUIDs held, as picked when it was made
    Column("created_at", Float, nullable=False),
)
