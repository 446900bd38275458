"""Metering (issue 52): one row per run of a replica on a card or a share of one, its hourly,
daily and monthly sums, and the all-time totals ``/metrics`` counts from.

A record is keyed by (job, attempt, replica, card): each attempt of a job is its own record, and
an adopted run after a restart continues the row it had (``server/usage/meter.py``). Its sums
(``seconds`` held, card-seconds by share, GiB-seconds, compute-unit-seconds, joules) grow at each
sampling interval while it is open (``ended_at`` null) and stop when it is closed. The rollups
hold the same sums per bucket (``step`` 'hour', 'day' or 'month' (UTC calendar months),
``bucket`` its start in Unix seconds)
and per (tenant, queue, site, model), with their ``cost`` at the prices in force as each part
was used (0 where no price table was); tenant ``pool`` holds the energy of the shared cards'
unheld remainder. Records and rollups are kept ``--usage-retention`` (400 days by default),
apart from job retention; the totals are never deleted (one row per label set).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table

from xpupool.server.storage.meta import metadata

SUMS = ("device_seconds", "gib_seconds", "cu_seconds", "energy_j")
"""The sums each record, rollup and total carries: card-seconds weighted by share, device-memory
GiB-seconds, compute-unit-seconds (card-seconds x units of the model), joules."""

LABELS = ("tenant", "queue", "site", "model")

usage_records = Table(
    "usage_records",
    metadata,
    Column("job_id", Integer, primary_key=True),  # not a foreign key: usage outlives the job
    Column("attempt", Integer, primary_key=True),
    Column("replica", Integer, primary_key=True),
    Column("uuid", String(200), primary_key=True),  # the card
    Column("tenant", String(63), nullable=False),
    Column("queue", String(63), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("site", String(63), nullable=False),
    Column("node", String(63), nullable=False),
    Column("model", String(200), nullable=False),
    Column("share", Float, nullable=False),  # the card's compute held, 0..1
    Column("memory_gib", Float, nullable=False),  # device memory held
    Column("units", Float, nullable=False),  # compute units of a whole card of the model
    Column("started_at", Float, nullable=False),
    Column("advanced_at", Float, nullable=False),  # counted up to here
    Column("ended_at", Float, nullable=True),  # null: running
    Column("seconds", Float, nullable=False),
    *(Column(name, Float, nullable=False) for name in SUMS),
    Index("usage_records_open", "ended_at"),
    Index("usage_records_tenant_start", "tenant", "started_at"),
)

usage_rollups = Table(
    "usage_rollups",
    metadata,
    Column("step", String(8), primary_key=True),  # hour | day | month
    Column("bucket", Float, primary_key=True),  # its start, Unix seconds (UTC)
    *(Column(name, String(200), primary_key=True) for name in LABELS),
    *(Column(name, Float, nullable=False) for name in SUMS),
    # at the prices in force when each part of it was used (server/usage/price_history.py)
    Column("cost", Float, nullable=False, server_default="0"),
    Index("usage_rollups_tenant", "step", "tenant", "bucket"),
)

usage_totals = Table(
    "usage_totals",
    metadata,
    *(Column(name, String(200), primary_key=True) for name in LABELS),
    *(Column(name, Float, nullable=False) for name in SUMS),
)

usage_idle_power = Table(
    "usage_idle_power",
    metadata,
    Column("model", String(200), primary_key=True),  # catalog name (or printed, if none)
    Column("watts", Float, nullable=False),  # server/usage/idle_power.py: a low percentile
    Column("samples", Integer, nullable=False),  # readings it was taken over
    Column("updated_at", Float, nullable=False),
)
"""Idle power learned per card model from its cards' own readings while they held nothing."""
