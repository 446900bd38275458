"""Measured throughput (issue 55): one row per (tenant, job kind, card model), the figure the
plane's :class:`~xpupool.catalog.throughput.ThroughputTable` holds for it, written at each report
so that what was learned survives a restart (``server/throughput_knowledge.py``)."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table

from xpupool.model.speeds import MAX_KIND_CHARS
from xpupool.server.storage.meta import metadata

throughput_measured = Table(
    "throughput_measured",
    metadata,
    Column("tenant", String(63), primary_key=True),  # whose jobs reported it (not a foreign key)
    Column("kind", String(MAX_KIND_CHARS), primary_key=True),
    Column("model", String(200), primary_key=True),  # the card model, upper-case
    Column("rate", Float, nullable=False),  # per second, in the kind's own unit
    Column("runs", Integer, nullable=False),
    Column("reports", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)
