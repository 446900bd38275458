"""The fleet's history, kept by the server itself so that a one-host install needs no Prometheus.

Every ``--history-interval`` seconds (default 60) the server's watch thread (``app.py``, beside
the retention sweep) takes the fleet overview's numbers (``services/overview.py`` ``snapshot``:
column sums, milliseconds at 5,000 nodes, under the plane's lock) and writes one row per
(site, model), per site, per model and for the whole fleet (site or model '' = every one) into
``fleet_history`` (``storage/history.py``), outside the plane's lock, in its own transaction.

Tiers (:data:`DEFAULT_TIERS`): the raw samples are kept 2 hours; 5-minute means 2 days; 1-hour
means 8 days. A coarse tier's row for the bucket being filled is recomputed from the raw rows
in that bucket at each sample (so raw rows must outlive the coarsest bucket: checked), and each
tier's rows past its keep are deleted in the same transaction. So the table is bounded: at most
``MAX_KEYS`` keys per sample times (keep / step + 1) rows per tier, 121 + 577 + 193 = 891 rows
per key at the default 60 s interval.

Series (the columns of ``storage/history.SERIES``): ``devices_total``, ``devices_busy``,
``util_pct_mean`` (mean reported utilisation of the cards reporting), ``devices_allocated``,
``memory_mib_allocated``; ``stranded_memory_mib`` and ``stranded_core_pct`` per site and for the
fleet (the measure is per node); ``pending`` (jobs of every tenant) for the fleet only.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from sqlalchemy import Connection, and_, delete, func, insert, select
from sqlalchemy.exc import OperationalError

from xpupool.model.errors import RequestError
from xpupool.server.health import store_failure
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.overview import History, HistorySeries
from xpupool.server.services.overview import Snapshot, layout, snapshot
from xpupool.server.storage.history import SERIES, fleet_history

log = logging.getLogger("xpupool.server")

RAW = "raw"
MAX_KEYS = 1024
"""(site, model) keys written per sample at most: the fleet, then the sites, the models, and
pairs in order until this many (a pool of more than ~1,000 site-model pairs loses the rest)."""
MAX_NAME = 200  # characters of a site or model named in a query


@dataclass(frozen=True, slots=True)
class Tier:
    """Rows of ``name`` are means over ``step_s``-wide buckets (the raw tier: the samples
    themselves, ``step_s`` 0), kept ``keep_s`` seconds."""

    name: str
    step_s: float
    keep_s: float


DEFAULT_TIERS = (
    Tier(RAW, 0.0, 2 * 3600.0),
    Tier("5m", 300.0, 2 * 86400.0),
    Tier("1h", 3600.0, 8 * 86400.0),
)
WINDOWS: dict[str, tuple[float, str]] = {
    "1h": (3600.0, RAW),
    "1d": (86400.0, "5m"),
    "1w": (7 * 86400.0, "1h"),
}
"""A query's window: (seconds back, the tier read)."""

METRICS: tuple[tuple[str, str, str, float], ...] = (
    ("devices_total", "xpupool_fleet_devices", "Cards in the pool.", 1.0),
    (
        "devices_busy",
        "xpupool_fleet_devices_busy",
        "Cards reported busy (overview threshold).",
        1.0,
    ),
    (
        "util_pct_mean",
        "xpupool_fleet_utilization_ratio",
        "Mean reported utilisation (0..1) of the cards reporting.",
        0.01,
    ),
    ("devices_allocated", "xpupool_fleet_devices_allocated", "Cards some job holds.", 1.0),
    (
        "memory_mib_allocated",
        "xpupool_fleet_device_memory_allocated_bytes",
        "Device memory granted to jobs.",
        float(1 << 20),
    ),
    (
        "stranded_memory_mib",
        "xpupool_fleet_stranded_device_memory_bytes",
        "Idle device memory no pending or common job shape can use.",
        float(1 << 20),
    ),
    (
        "stranded_core_pct",
        "xpupool_fleet_stranded_device_cores",
        "Idle device compute, in cards, no pending or common job shape can use.",
        0.01,
    ),
    ("pending", "xpupool_fleet_pending_jobs", "Jobs waiting to be placed (every tenant).", 1.0),
)
"""(series, Prometheus gauge, help, scale to base units): the last sample in ``/metrics``,
labelled site and model ('' = every one)."""

Row = dict[str, float | None]


def sample_rows(snap: Snapshot, pending: int) -> dict[tuple[str, str], Row]:
    """One sample's rows by (site, model) from the overview's per-group sums."""
    acc: dict[tuple[str, str], list[float]] = {}
    for g, (site, _vendor, model) in enumerate(snap.layout.labels):
        values = (
            float(snap.devices[g]),
            float(snap.busy[g]),
            float(snap.reporting[g]),
            float(snap.util_sum[g]),
            float(snap.allocated[g]),
            float(snap.memory_allocated[g]),
        )
        for key in (("", ""), (site, ""), ("", model), (site, model)):
            row = acc.setdefault(key, [0.0] * len(values))
            for i, v in enumerate(values):
                row[i] += v
    order = sorted(acc, key=lambda k: (k[0] != "" and k[1] != "", k[1] != "", k))
    rows: dict[tuple[str, str], Row] = {}
    for key in order[:MAX_KEYS]:
        total, busy, reporting, util_sum, allocated, memory = acc[key]
        rows[key] = {
            "devices_total": total,
            "devices_busy": busy,
            "util_pct_mean": util_sum / reporting if reporting else None,
            "devices_allocated": allocated,
            "memory_mib_allocated": memory,
        }
    if len(order) > MAX_KEYS:
        log.warning("fleet history: %d keys, the first %d kept", len(order), MAX_KEYS)
    stranded = snap.stranded
    for site, (memory_mib, core_milli, _cards) in snap.stranded_by_site.items():
        if (site, "") in rows:
            rows[(site, "")]["stranded_memory_mib"] = float(memory_mib)
            rows[(site, "")]["stranded_core_pct"] = core_milli / 10
    fleet = rows.setdefault(("", ""), {})
    if stranded is not None:
        fleet["stranded_memory_mib"] = float(stranded.total_memory_mib)
        fleet["stranded_core_pct"] = stranded.total_core_milli / 10
    fleet["pending"] = float(pending)
    return rows


def write_sample(
    conn: Connection, now: float, rows: dict[tuple[str, str], Row], tiers: tuple[Tier, ...]
) -> None:
    """Write one sample taken at ``now`` into the raw tier, recompute each coarse tier's
    current bucket from the raw rows in it, and delete every tier's rows past its keep."""
    t = fleet_history
    conn.execute(delete(t).where(t.c.tier == RAW, t.c.t == now))  # the same instant twice
    if rows:
        conn.execute(
            insert(t),
            [
                {"tier": RAW, "site": k[0], "model": k[1], "t": now, "samples": 1}
                | {name: row.get(name) for name in SERIES}
                for k, row in rows.items()
            ],
        )
    for tier in tiers:
        if tier.name == RAW:
            continue
        start = math.floor(now / tier.step_s) * tier.step_s
        conn.execute(delete(t).where(t.c.tier == tier.name, t.c.t == start))
        in_bucket = and_(t.c.tier == RAW, t.c.t >= start, t.c.t < start + tier.step_s)
        means = (
            select(
                t.c.site,
                t.c.model,
                *(func.avg(t.c[name]).label(name) for name in SERIES),
                func.count().label("samples"),
            )
            .where(in_bucket)
            .group_by(t.c.site, t.c.model)
        )
        found = [dict(r) for r in conn.execute(means).mappings()]
        if found:
            conn.execute(insert(t), [{"tier": tier.name, "t": start} | r for r in found])
    for tier in tiers:
        conn.execute(delete(t).where(t.c.tier == tier.name, t.c.t < now - tier.keep_s))


class FleetHistory:
    """Takes a sample when one is due (:meth:`maybe_sample`, called from the watch thread)."""

    def __init__(
        self,
        plane: ControlPlane,
        interval_s: float | None = None,
        tiers: tuple[Tier, ...] = DEFAULT_TIERS,
    ) -> None:
        self.plane = plane
        self.interval_s = plane.history_interval_s if interval_s is None else interval_s
        raw = [tier for tier in tiers if tier.name == RAW]
        if len(raw) != 1:
            raise ValueError("tiers: exactly one raw tier")
        for tier in tiers:
            if tier.name != RAW and not 0 < tier.step_s <= raw[0].keep_s:
                raise ValueError(
                    f"tiers: {tier.name} buckets ({tier.step_s:g} s) must be filled from raw "
                    f"samples kept {raw[0].keep_s:g} s"
                )
        self.tiers = tiers
        self.last: float | None = None

    def maybe_sample(self) -> bool:
        """Sample now if ``interval_s`` has passed since the last sample (or none was taken)."""
        now = self.plane.clock()
        if self.last is not None and now - self.last < self.interval_s:
            return False
        self.sample(now)
        return True

    def sample(self, now: float) -> int:
        """Take one sample at ``now``; returns the rows written. The overview's sums are read
        from one state of the plane; the write is a transaction of its own, outside it."""
        plane = self.plane
        snap, pending = plane.read(lambda: (snapshot(plane, now), len(plane.queued)))
        plane.forget_gone_cards()
        rows = sample_rows(snap, pending)
        self.last = now  # a failed write is tried again one interval later
        try:
            with plane.db.begin() as conn:
                write_sample(conn, now, rows, self.tiers)
        except (OperationalError, OSError) as exc:
            # The store failing is the server's health, said once there (one line, no traceback
            # per sample); the sampler waits until the store takes writes again.
            plane.health.fail(store_failure(exc))
            return 0
        return len(rows)


def history_series(
    plane: ControlPlane, window: str, site: str | None, model: str | None
) -> History:
    """The series of (``site``, ``model``) over ``window`` (see the module docstring).
    RequestError names ``window``, ``site`` or ``model`` when it is unknown."""
    if window not in WINDOWS:
        raise RequestError("window", window, f"expected one of {', '.join(WINDOWS)}")
    back_s, tier = WINDOWS[window]
    sites = plane.node_sites()
    models = plane.read(lambda: {g[2] for g in layout(plane).labels})
    t = fleet_history
    with plane.db.connect() as conn:
        for name, value, known in (("site", site, sites), ("model", model, models)):
            if value is None or value in known:
                continue
            column = t.c.site if name == "site" else t.c.model
            stored = (
                len(value) <= MAX_NAME
                and value != ""
                and conn.execute(
                    select(t.c.t).where(t.c.tier == tier, column == value).limit(1)
                ).first()
                is not None
            )
            if not stored:
                listed = ", ".join(sorted(known)[:20]) or "none"
                raise RequestError(
                    name, value, f"no such {name} in the pool or its history; known: {listed}"
                )
        now = plane.clock()
        key = and_(t.c.tier == tier, t.c.site == (site or ""), t.c.model == (model or ""))
        query = select(t).where(key, t.c.t >= now - back_s).order_by(t.c.t)
        rows = list(conn.execute(query).mappings())
    kept = [n for n in SERIES if _kept_for(n, site, model)]
    series = [
        HistorySeries(
            name=name,
            site=site,
            model=model,
            points=[(float(r["t"]), float(r[name])) for r in rows if r[name] is not None],
        )
        for name in kept
    ]
    step = (
        plane.history_interval_s
        if tier == RAW
        else next(x.step_s for x in DEFAULT_TIERS if x.name == tier)
    )
    return History(window=window, step_s=step, series=series)  # type: ignore[arg-type]


def _kept_for(name: str, site: str | None, model: str | None) -> bool:
    """Stranded capacity is kept per site and for the fleet; pending jobs for the fleet only."""
    if name.startswith("stranded_"):
        return model is None
    if name == "pending":
        return site is None and model is None
    return True


def latest(plane: ControlPlane) -> list[dict[str, object]]:
    """The last raw sample's rows (for ``/metrics``); empty before the first sample."""
    t = fleet_history
    with plane.db.connect() as conn:
        last = conn.execute(select(func.max(t.c.t)).where(t.c.tier == RAW)).scalar()
        if last is None:
            return []
        return [
            dict(r)
            for r in conn.execute(select(t).where(t.c.tier == RAW, t.c.t == last)).mappings()
        ]
