"""The fleet's sampled history (``server/history.py``): one row per tier, time, site and model,
one column per series.

Bounded: each tier's rows older than its keep are deleted in the transaction that writes the
next sample, and a sample has at most ``history.MAX_KEYS`` (site, model) keys, so the table holds
at most ``MAX_KEYS * sum(keep / step + 1 over the tiers)`` rows (docs/fleet-overview.md).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table

from xpupool.server.storage.meta import metadata

SERIES = (
    "devices_total",
    "devices_busy",
    "util_pct_mean",
    "devices_allocated",
    "memory_mib_allocated",
    "stranded_memory_mib",
    "stranded_core_pct",
    "pending",
)
"""The series each row may carry (null where the series is not kept for that key, or unknown)."""

fleet_history = Table(
    "fleet_history",
    metadata,
    Column("tier", String(8), primary_key=True),  # raw | 5m | 1h
    Column("site", String(63), primary_key=True),  # '' = every site
    Column("model", String(200), primary_key=True),  # '' = every model
    Column("t", Float, primary_key=True),  # Unix time: the sample's, or its bucket's start
    Column("samples", Integer, nullable=False),  # raw samples averaged into the row
    *(Column(name, Float, nullable=True) for name in SERIES),
    Index("fleet_history_tier_t", "tier", "t"),
)
