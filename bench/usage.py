"""What metering costs (issue 52): recording, and reading usage back over a million records.

    python bench/usage.py --json                     # the figures in docs/benchmarks.md
    python bench/usage.py --json --records 20000 --runs 2000

Recording (a microbenchmark of ``server/usage/meter.py`` over a SQLite file, a stand-in for the
plane that gives it only its clock, store, held jobs and card readings): CPU microseconds per
replica start, per stop and per power sample, each the hook the plane calls under its lock plus
that item's share of the flush that writes it (``--runs`` runs of one card each). From these,
the share of one core the plane would spend at 1,000 nodes x 8 cards all held, each card's run
advanced once per ``--interval`` (``xpupool up --usage-interval``, 60 s by default), and 200
jobs/s started and as many stopped.

Reading: a store holding ``--records`` usage records (100 tenants, two queues each, two sites,
six models, starts spread over 30 days, runs of an hour on average) and the rollups the meter
keeps for them; p50 and p99 over ``--repeat`` calls of ``GET /v1/usage`` (the service it
routes to, in process, no HTTP) for one tenant by day over 30 days, and for the fleet by
tenant over a month (``step=month``, the admin's view). A price table is set, so each answer
carries its cost (summed from the rollups' cost, as the meter prices them). Answers are computed
each call (no cache of answers exists).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, insert

from xpupool.catalog.power import PowerModel
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.server.auth import Principal
from xpupool.server.plane import HeldJob
from xpupool.server.schemas.agent_protocol import DeviceMetrics
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.storage import meta
from xpupool.server.storage.billing import usage_price_tables
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.usage import SUMS, usage_records, usage_rollups, usage_totals
from xpupool.server.usage import query
from xpupool.server.usage.billing import Billing
from xpupool.server.usage.buckets import spread
from xpupool.server.usage.meter import UsageMeter

T = TypeVar("T")
MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB", "910B3", "MI300X", "L20", "MLU590")
DAY = 86400.0


class PlaneStandIn:
    """What ``UsageMeter.flush`` and ``query.usage`` read of a plane (``query.usage`` asks its
    billing whether prices are set)."""

    def __init__(self, db: Engine, now: float) -> None:
        self.db = db
        self.now = now
        self.held: dict[int, HeldJob] = {}
        self.metrics: dict[str, DeviceMetrics] = {}
        self.meter = UsageMeter()  # its compute units, which the prices' model names follow
        self.billing = Billing()  # the store's price tables (reading() sets one)

    def clock(self) -> float:
        return self.now

    def read(self, look: Callable[[], T]) -> T:
        return look()

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]:
        return self.held

    def device_metrics(self, uuid: str) -> DeviceMetrics:
        """The card's last reading, as the plane keeps it (made once, not per read)."""
        found = self.metrics.get(uuid)
        if found is None:
            found = DeviceMetrics(uuid=uuid, power_w=300.0, utilization_pct=80.0, health_cause=None)
            self.metrics[uuid] = found
        return found

    def idle_power_readings(self) -> list[tuple[str, float]]:
        """Every card of the benchmark is held: no idle card's power to learn from."""
        return []

    def use_power(self, power: PowerModel) -> None:
        """The power model the meter counts with, handed on: no engine here to take it."""


def cpu() -> float:
    """The process's CPU seconds: what recording costs the plane, whatever else the machine runs
    (a wall clock on a shared machine counts the other processes' turns too)."""
    return time.process_time()


def recording(runs: int, tmp: Path, interval_s: float = 60.0) -> dict[str, float]:
    db = meta.connect(f"sqlite:///{tmp / 'record.db'}")
    plane = PlaneStandIn(db, 1_800_000_000.0)
    meter = UsageMeter()
    nodes = [
        Node(
            f"n{n}",
            1 << 20,
            1 << 30,
            tuple(Device(f"g{8 * n + i}", "nvidia", MODELS[n % 6], 81920, i) for i in range(8)),
        )
        for n in range((runs + 7) // 8)
    ]
    jobs = []
    for i in range(runs):
        share = DeviceShare(f"g{i}", i, 81920, 1000)
        alloc = Allocation(i + 1, "r", 0, f"n{i // 8}", 0, 0, 0, (share,))
        jobs.append(HeldJob(i + 1, f"t{i % 100}", "q", "", 0, JobPhase.RUNNING, [alloc], attempt=1))
    for i in range(runs):  # the cards' readings, as the plane holds them from heartbeats
        plane.device_metrics(f"g{i}")
    meter.flush(plane)  # seeds the totals: not a recording cost

    # starts and stops come at their own instants through an interval, as they do at 200/s
    step = interval_s / runs
    started = cpu()
    for job in jobs:
        meter.replica_started(job, 0, nodes[(job.id - 1) // 8], plane.now + job.id * step)
    hook_start = cpu() - started
    plane.now += interval_s
    started = cpu()
    meter.flush(plane)
    flush_start = cpu() - started

    samples = []
    for _ in range(3):
        plane.now += interval_s
        started = cpu()
        meter.flush(plane)
        samples.append(cpu() - started)
    flush_sample = statistics.median(samples)

    started = cpu()
    for job in jobs:
        meter.replica_ended(job.id, 1, 0, plane.now + job.id * step)
    hook_stop = cpu() - started
    plane.now += interval_s
    started = cpu()
    meter.flush(plane)
    flush_stop = cpu() - started
    db.dispose()

    us = 1e6 / runs
    start_us = (hook_start + flush_start - flush_sample) * us  # the sample part is counted apart
    stop_us = (hook_stop + flush_stop - flush_sample) * us
    sample_us = flush_sample * us
    cards_held, jobs_s = 8000, 200.0
    per_s_us = jobs_s * (start_us + stop_us) + cards_held / interval_s * sample_us
    return {
        "runs": runs,
        "start_us": round(max(start_us, 0.0), 2),
        "start_hook_us": round(hook_start * us, 2),
        "stop_us": round(max(stop_us, 0.0), 2),
        "stop_hook_us": round(hook_stop * us, 2),
        "power_sample_us": round(sample_us, 2),
        "interval_s": interval_s,
        "plane_cpu_pct_1000_nodes_200_jobs_s": round(per_s_us / 1e4, 2),
    }


def fill(db: Engine, records: int, now: float, seed: int = 0) -> int:
    """``records`` closed records over the 30 days before ``now`` and their rollups and totals,
    as the meter would have written them; returns the rollup rows."""
    rng = random.Random(seed)
    rollup: dict[tuple[str, float, str, str, str, str], list[float]] = {}
    rows = []
    batch = 50_000
    for i in range(records):
        tenant = f"t{rng.randrange(100)}"
        queue = f"{tenant}-{rng.randrange(2)}"
        site = f"site-{rng.randrange(2)}"
        model = MODELS[rng.randrange(6)]
        start = now - 30 * DAY + rng.random() * 30 * DAY
        seconds = min(rng.expovariate(1 / 3600.0), now - start)
        share = rng.choice((0.25, 0.5, 1.0))
        sums = [share * seconds, 80.0 * seconds, share * 300.0 * seconds, 300 * share * seconds]
        rows.append(
            {
                "job_id": i,
                "attempt": 1,
                "replica": 0,
                "uuid": f"g{i % 8000}",
                "tenant": tenant,
                "queue": queue,
                "priority": 0,
                "site": site,
                "node": f"n{i % 1000}",
                "model": model,
                "share": share,
                "memory_gib": 80.0,
                "units": 300.0,
                "started_at": start,
                "advanced_at": start + seconds,
                "ended_at": start + seconds,
                "seconds": seconds,
                **dict(zip(SUMS, sums, strict=True)),
            }
        )
        for step, bucket, fraction in spread(start, start + seconds):
            into = rollup.setdefault((step, bucket, tenant, queue, site, model), [0.0] * 4)
            for k, v in enumerate(sums):
                into[k] += v * fraction
        if len(rows) >= batch:
            with db.begin() as conn:
                insert_rows(conn, usage_records, rows)
            rows = []
    with db.begin() as conn:
        insert_rows(conn, usage_records, rows)
        keys = ("step", "bucket", "tenant", "queue", "site", "model")
        conn.execute(
            insert(usage_rollups),
            [
                dict(zip(keys, k, strict=True)) | dict(zip(SUMS, v, strict=True))
                for k, v in rollup.items()
            ],
        )
        conn.execute(
            insert(usage_totals),
            [
                {"tenant": "t0", "queue": "t0-0", "site": "site-0", "model": MODELS[0]}
                | dict.fromkeys(SUMS, 0.0)
            ],
        )
    return len(rollup)


def percentiles(call: Callable[[], Any], repeat: int) -> dict[str, float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    out.sort()
    return {
        "p50_ms": round(out[len(out) // 2], 2),
        "p99_ms": round(out[min(len(out) - 1, int(len(out) * 0.99))], 2),
    }


def reading(records: int, repeat: int, tmp: Path) -> dict[str, Any]:
    now = 1_800_000_000.0
    db = meta.connect(f"sqlite:///{tmp / 'read.db'}")
    started = time.perf_counter()
    rollup_rows = fill(db, records, now)
    filled_s = time.perf_counter() - started
    prices = {"currency": "EUR", "per_kwh": 0.25}
    prices["models"] = [{"model": m, "per_card_hour": 2.0} for m in MODELS]
    with db.begin() as conn:  # answers priced, as a deployment's
        conn.execute(
            insert(usage_price_tables).values(effective_at=0.0, prices=prices, updated_at=now)
        )
    plane = PlaneStandIn(db, now)
    tenant = Principal(1, "tenant", "t7")
    admin = Principal(0, "admin", None)
    month = str(now - 30 * DAY)
    one = query.usage(plane, tenant, "tenant", month, None, "day")  # type: ignore[arg-type]
    fleet = query.usage(plane, admin, "tenant", month, None, "month")  # type: ignore[arg-type]
    result = {
        "records": records,
        "rollup_rows": rollup_rows,
        "fill_s": round(filled_s, 1),
        "tenant_by_day_30d": percentiles(
            lambda: query.usage(plane, tenant, "tenant", month, None, "day"),  # type: ignore[arg-type]
            repeat,
        )
        | {"rows": len(one.rows)},
        "fleet_by_tenant_month": percentiles(
            lambda: query.usage(plane, admin, "tenant", month, None, "month"),  # type: ignore[arg-type]
            repeat,
        )
        | {"rows": len(fleet.rows)},
    }
    db.dispose()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object (the default)")
    ap.add_argument("--runs", type=int, default=10_000, help="runs recorded by the microbench")
    ap.add_argument("--records", type=int, default=1_000_000, help="records in the read store")
    ap.add_argument("--repeat", type=int, default=200, help="calls per query")
    ap.add_argument("--interval", type=float, default=60.0, help="usage interval, s")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xpupool-usage-") as tmp:
        result = {
            "recording": recording(args.runs, Path(tmp), args.interval),
            "reading": reading(args.records, args.repeat, Path(tmp)),
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
