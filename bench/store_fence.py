"""What the store's fence costs a write transaction (``server/ownership.py``, issue 43 item 6).

    python bench/store_fence.py              # 4 rounds of 2,000 transactions each way
    python bench/store_fence.py --n 5000 --rounds 5

On one real SQLite file (WAL, as ``xpupool up`` opens it), through one kept connection as
``ControlPlane.write`` holds it, each transaction inserts one job event row, as a submission's
smallest write does. Two engines on the same file, one plain and one fenced (the owner row
claimed, its epoch checked before each commit), take turns round by round, so that the machine's
load weighs on both alike. Also timed: a transaction that writes nothing (not checked). Prints
JSON: microseconds per transaction (median over rounds) each way, and the difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import Connection, Engine, insert, select, text

from xpupool.server.ownership import Identity, StoreOwnership
from xpupool.server.storage import meta
from xpupool.server.storage.jobs import job_events


def _prepare(conn: Connection) -> None:
    """One tenant, queue and job for the event rows to belong to (foreign keys are on)."""
    conn.execute(text("INSERT INTO tenants (name, weight, created_at) VALUES ('t', 1, 0)"))
    conn.execute(
        text("INSERT INTO queues (name, tenant, quotas, created_at) VALUES ('q', 't', '[]', 0)")
    )
    conn.execute(
        text(
            "INSERT INTO jobs (id, name, tenant, queue, state, reason, priority, request, "
            "command, env, on_node_lost, attempts, retries, created_at, updated_at) VALUES "
            "(1, 'j', 't', 'q', 'pending', '', 0, '{}', '[]', '{}', 'requeue', 0, 0, 0, 0)"
        )
    )


def _writes(engine: Engine, n: int) -> float:
    """Seconds per transaction of ``n`` one-row write transactions on a kept connection."""
    row = {"job_id": 1, "at": 0.0, "state": "pending", "reason": "bench"}
    with engine.connect() as conn:
        started = time.perf_counter()
        for _ in range(n):
            with conn.begin():
                conn.execute(insert(job_events), row)
        return (time.perf_counter() - started) / n


def _reads(engine: Engine, n: int) -> float:
    """Seconds per transaction of ``n`` transactions that only read (committed, not checked)."""
    with engine.connect() as conn:
        started = time.perf_counter()
        for _ in range(n):
            with conn.begin():
                conn.execute(select(job_events.c.id).limit(1)).all()
        return (time.perf_counter() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="transactions per round and way")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        plain = meta.connect(url)
        with plain.begin() as conn:
            _prepare(conn)
        owner = StoreOwnership(url, Identity.here(Path(tmp)), lease_s=60.0)
        owner.claim()
        fenced = meta.connect(url)
        owner.fence(fenced)
        times: dict[str, list[float]] = {k: [] for k in ("plain", "fenced", "plain_r", "fenced_r")}
        ways = [("plain", plain), ("fenced", fenced)]
        for i in range(args.rounds):
            for name, engine in ways if i % 2 == 0 else ways[::-1]:  # each goes first in turn
                times[name].append(_writes(engine, args.n))
                times[f"{name}_r"].append(_reads(engine, args.n))
        us = {k: round(statistics.median(v) * 1e6, 1) for k, v in times.items()}
        owner.release()
        for engine in (plain, fenced):
            engine.dispose()
    print(
        json.dumps(
            {
                "transactions_per_round": args.n,
                "rounds": args.rounds,
                "write_tx_us": {"plain": us["plain"], "fenced": us["fenced"]},
                "write_tx_fence_us": round(us["fenced"] - us["plain"], 1),
                "read_only_tx_us": {"plain": us["plain_r"], "fenced": us["fenced_r"]},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
