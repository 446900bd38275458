"""How long a plane takes to open on a store that kept many succeeded jobs, with and without
reading their run times back (``server/plane/learned_runs.py``).

    python bench/plane_open.py --json                         # 100,000 jobs of 50 shapes
    python bench/plane_open.py --jobs 20000 --shapes 10 --rounds 5

A fresh SQLite store (``--db URL``: a PostgreSQL database of yours instead, whose jobs table the
bench fills, so give it an empty one) gets one tenant and ``--jobs`` succeeded jobs through the
store's own writes (``storage/driver_insert.insert_rows``, the rows as a submission writes them,
then the columns a success leaves): ``--shapes`` shapes (``A100:1 mem=<k>Gi``), each run one
minute to three hours. Then a plane (``ControlPlane``, as ``xpupool up`` opens it, no nodes) is opened and
closed ``--rounds`` times each way, alternating: ``with`` as the plane opens, ``without`` with
the run times' read replaced by nothing. Prints the medians of wall and CPU seconds per opening,
and those of the read alone (``relearn``: its rows and runs). Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from xpupool.engine.site_choice import RunTimes
from xpupool.model.request_model import request_to_dict
from xpupool.model.spec import parse_spec
from xpupool.server.datadir import open_pool
from xpupool.server.plane import learned_runs
from xpupool.server.plane.control import ControlPlane
from xpupool.server.schemas.tenants import TenantIn
from xpupool.server.services.tenants import create_tenant
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.jobs import jobs as t_jobs

BATCH = 5000  # rows per insert statement while filling the store


def fill(url: str, data: Path, jobs: int, shapes: int) -> None:
    """The pool's row, tenant ``a`` and ``jobs`` succeeded jobs of ``shapes`` shapes."""
    open_pool(data, url, reinitialise=False)
    plane = ControlPlane(url, data)
    create_tenant(plane, TenantIn(name="a"))
    requests = [
        request_to_dict(replace(parse_spec(f"A100:1 mem={k + 1}Gi"), queue="a"))
        for k in range(shapes)
    ]
    t0 = 1.7e9
    with plane.db.begin() as conn:
        for first in range(1, jobs + 1, BATCH):
            rows = [
                _row(i, requests[i % shapes], t0 + 60.0 * i)
                for i in range(first, min(first + BATCH, jobs + 1))
            ]
            insert_rows(conn, t_jobs, rows)
    plane.db.dispose()


def _row(job_id: int, request: dict[str, Any], started_at: float) -> dict[str, Any]:
    ran_s = 60.0 + (job_id * 7919) % 10_800  # one minute to three hours
    return {
        "id": job_id,
        "name": f"job-{job_id}",
        "tenant": "a",
        "queue": "a",
        "state": "succeeded",
        "reason": "exited 0",
        "priority": 0,
        "request": {"name": f"job-{job_id}", **request},  # as stored: each its own name
        "command": ["true"],
        "env": {},
        "on_node_lost": "requeue",
        "flavor": "*",
        "exit_code": 0,
        "attempts": 1,
        "retries": 0,
        "started_at": started_at,
        "created_at": started_at - 1.0,
        "updated_at": started_at + ran_s,
    }


def open_once(url: str, data: Path, read: bool) -> tuple[float, float]:
    """(wall s, CPU s) of one plane opening; ``read``: with the run times' read."""
    kept = learned_runs.relearn
    if not read:
        learned_runs.relearn = lambda *_a, **_k: 0
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        plane = ControlPlane(url, data)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        learned_runs.relearn = kept
    plane.db.dispose()
    return wall, cpu


def read_once(url: str, data: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, runs learned) of the read alone, on a plane's connection."""
    plane = ControlPlane(url, data)
    try:
        with plane.db.connect() as conn:
            wall, cpu = time.perf_counter(), time.process_time()
            runs = learned_runs.relearn(conn, RunTimes())
            return time.perf_counter() - wall, time.process_time() - cpu, runs
    finally:
        plane.db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--shapes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", default=None, help="a store URL (default: a fresh SQLite file)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        url = args.db or f"sqlite:///{data / 'state.db'}"
        fill(url, data, args.jobs, args.shapes)
        took: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        reads = []
        for _ in range(args.rounds):
            took["with"].append(open_once(url, data, True))
            took["without"].append(open_once(url, data, False))
            reads.append(read_once(url, data))
    out = {
        "jobs": args.jobs,
        "shapes": args.shapes,
        "rounds": args.rounds,
        "read_limit": learned_runs.RELEARN_JOBS,
        **{
            f"open_{k}": {
                "wall_s": round(statistics.median(w for w, _ in v), 3),
                "cpu_s": round(statistics.median(c for _, c in v), 3),
            }
            for k, v in took.items()
        },
        "read_alone": {
            "wall_s": round(statistics.median(r[0] for r in reads), 3),
            "cpu_s": round(statistics.median(r[1] for r in reads), 3),
            "runs": reads[0][2],
        },
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
