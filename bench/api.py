"""Submission -> scheduled latency and sustained submissions/s of the embedded control plane.

    python bench/api.py --json                    # 200 nodes, 200 submissions/s for 15 s
    python bench/api.py --rate 400 --seconds 10 --nodes 500
    python bench/api.py --in-process [--policy binpack]   # the engine alone, same pool and mix
    python bench/api.py --sweep [--seconds 10] [--table]  # issue 25's table, one server per row
    python bench/api.py --idle 5000                # CPU of an idle server (in-process agent)
    python bench/api.py --nodes 1000 --db postgresql://user@host/db   # SQLite, then PostgreSQL
    python bench/api.py --nodes 1000 --db sqlite,postgresql --rounds 3  # a throwaway PostgreSQL

Starts a real ``xpupool up --no-agent`` on 127.0.0.1 with a generated cluster file (``--nodes``
simulated hosts x 8 cards over six models of five vendors), creates two tenants, and submits
open-loop at ``--rate`` from several threads for ``--seconds``: each submission has a fixed send
time, so a slow server makes the client late rather than the rate lower, and the lateness is
reported. The stream mixes fractional (most), whole and two-card requests, sized so that the pool
does not fill: every job should be placed. Reports, from each job's events, submission ->
scheduled latency (scheduled.at - pending.at, server clock) p50/p99/max; the client's submit round
trip p50/p99; submissions/s achieved; ``server_cpu_ms_per_job``, the server process's CPU (all
its threads) from the first submission until no job is pending, per job acknowledged: what one
submission costs it to take, store and schedule, which bounds the rate one server sustains; and
anything lost (a 201 job missing or not scheduled); and ``cpu_steal_fraction``, the share of the
machine's CPU time that the hypervisor gave to other guests while submitting (a shared VM that
reads high there ran this on less than its cores: compare such a run with care).
``steady_p50_ms`` / ``steady_p99_ms`` / ``steady_max_ms`` are the same latencies for the jobs
submitted ``--steady-after`` seconds (3) or more after the first: a fresh server learns its
workload from the first requests (``engine/fragmentation/workload_model.py``) and rebuilds what is
built on it several times in its first second; a server that has run a while has not.
Goal (DESIGN.md section 7): p99 <= 50 ms at 200 submissions/s, nothing lost.

``--db STORES`` runs the same measurement on several stores in one run: a comma-separated list of
``sqlite`` (the embedded store, always run, first), ``postgresql`` (a throwaway PostgreSQL server
that the bench starts as the tests do, ``tests/postgres.py``: ``initdb`` in a temporary folder,
127.0.0.1, a free port, stopped at the end) and PostgreSQL URLs (a server's, any database on it).
On a PostgreSQL server each round runs ``xpupool up --db`` on a database of its own that the bench
creates (``CREATE DATABASE``: the user needs that right) and drops after it, so nothing already on
the server is read or changed. ``--rounds N`` runs N rounds, the stores taking turns within each
(so that a change in the machine's load falls on all of them); prints ``{"sqlite": ...,
"postgresql": ...}``, each store's figures the medians of its rounds, with every round under
``each`` and the load average (1 min) at the end of each round under ``load_average``.

``--sweep`` runs the rows of issue 25's table one after another, a fresh server each: nodes 200,
1,000, 5,000 and 10,000 at 200/s, then 200, 500 and 1,000/s at 1,000 nodes, each for
``--seconds`` (the output says how long). Jobs are not released during a run (``--no-agent``:
nothing starts them), so the pool must hold every submission: 1,000 nodes hold about five times
what 200 do, more than 10 s at 1,000/s of this mix. ``--idle N`` starts ``xpupool up`` with N
simulated nodes and its in-process agent (which heartbeats for all of them), submits nothing, and
reports the server process's CPU (utime + stime from /proc/PID/stat) over ``--idle-seconds`` as a
fraction of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import importlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from xpupool.engine import DEFAULT_PROFILE
from xpupool.server.storage import meta

# (name prefix, site, vendor, model, memory, driver, link group size)
KINDS: tuple[tuple[str, str, str, str, str, str, int], ...] = (
    ("a100", "bj", "nvidia", "NVIDIA A100-SXM4-80GB", "80Gi", "550.54.15", 4),
    ("h100", "bj", "nvidia", "NVIDIA H100 80GB HBM3", "81559Mi", "560.35.03", 8),
    ("l20", "sh", "nvidia", "NVIDIA L20", "46068Mi", "535.104.05", 0),
    ("910b", "bj", "huawei", "910B3", "64Gi", "24.1.rc2", 8),
    ("mlu", "sh", "cambricon", "MLU370-X8", "48Gi", "5.10.22", 4),
    ("k100", "sh", "hygon", "K100_AI", "64Gi", "6.3.8", 0),
)
# (weight, spec): mostly fractional, some whole and two-card; far below the pool's capacity
MIX: tuple[tuple[int, str], ...] = (
    (30, "any:1 mem=4Gi cores=5%"),
    (20, "nvidia:1 mem=8Gi cores=10%"),
    (10, "A100 mem=10Gi cores=10%"),
    (8, "910B3 mem=8Gi cores=10%"),
    (6, "L20 mem=12Gi cores=25%"),
    (5, "MLU370-X8 mem=6Gi cores=10%"),
    (5, "K100_AI mem=8Gi cores=10%"),
    (6, "H100:1"),
    (4, "L20:1"),
    (3, "A100:2"),
    (3, "910B3:2"),
)


def cluster_yaml(nodes: int) -> str:
    lines = ["nodes:"]
    for k, (name, site, vendor, model, memory, driver, group) in enumerate(KINDS):
        count = nodes // len(KINDS) + (1 if k < nodes % len(KINDS) else 0)
        if count == 0:
            continue
        link = f", link_group_size: {group}" if group else ""
        lines += [
            f"  - name: {name}",
            f"    count: {count}",
            f"    site: {site}",
            "    cpu: 128",
            "    memory: 1Ti",
            "    devices:",
            f"      - {{vendor: {vendor}, model: '{model}', count: 8, memory: {memory}, "
            f"driver: '{driver}'{link}}}",
        ]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    data: Path,
    cluster: Path,
    port: int,
    policy: str = DEFAULT_PROFILE,
    agent: bool = False,
    db: str | None = None,
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-c", "from xpupool.cli import main; main()", "up"]
    args += ["--db", db] if db else []
    args += [] if agent else ["--no-agent"]
    args += ["--data", str(data), "--port", str(port), "--cluster", str(cluster)]
    args += ["--policy", policy]
    # what the server can take, not what one client may: no rate or connection limits (the
    # submitting threads share two tokens and one address)
    args += ["--rate-limit", "0", "--address-rate-limit", "0", "--connections-per-address", "0"]
    log = (data / "server.log").open("ab")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((data / "server.log").read_text()[-3000:])
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("xpupool up did not start in 120 s")


@dataclass
class Sent:
    """What the submitting threads saw, appended under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: list[int] = field(default_factory=list)
    rtt_s: list[float] = field(default_factory=list)
    late_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    first: float = float("inf")
    last: float = 0.0


def submitter(
    url: str, token: str, worker: int, workers: int, rate: float, total: int, t0: float, out: Sent
) -> None:
    """Open-loop submissions on one keep-alive connection. The standard library's client costs a
    fraction of httpx's CPU per request, which matters when client and server share the cores."""
    specs = [spec for weight, spec in MIX for _ in range(weight)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        for k in range(worker, total, workers):
            due = t0 + k / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            start = time.perf_counter()
            body = json.dumps(
                {"spec": specs[(k * 7919) % len(specs)], "name": f"b{k}", "command": ["true"]}
            )
            try:
                conn.request("POST", "/v1/jobs", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()  # reconnects on the next request
                with out.lock:
                    out.errors.append(repr(exc))
                continue
            end = time.perf_counter()
            with out.lock:
                out.late_s.append(max(start - due, 0.0))
                out.first, out.last = min(out.first, start), max(out.last, end)
                if r.status == 201:
                    out.ids.append(int(json.loads(data)["id"]))
                    out.rtt_s.append(end - start)
                else:
                    out.errors.append(f"{r.status} {data[:200]!r}")
    finally:
        conn.close()


def fetch_jobs(url: str, token: str, ids: list[int], threads: int = 8) -> list[dict[str, Any]]:
    """Every job with its events (the listing leaves events out)."""
    found: list[dict[str, Any]] = []
    lock = threading.Lock()

    def run(part: list[int]) -> None:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as c:
            for i in part:
                r = c.get(f"/v1/jobs/{i}")
                if r.status_code == 200:
                    with lock:
                        found.append(r.json())

    ts = [threading.Thread(target=run, args=(ids[w::threads],)) for w in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return found


def wait_settled(url: str, token: str, timeout_s: float = 60) -> int:
    """Wait until no job is pending (or ``timeout_s``); return how many still are."""
    deadline = time.monotonic() + timeout_s
    pending = -1
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
        while time.monotonic() < deadline:
            pending = len(c.get("/v1/jobs", params={"state": "pending", "limit": 1000}).json())
            if pending == 0:
                break
            time.sleep(0.2)
    return pending


STEADY_AFTER_S = 3.0
"""Jobs submitted this long after the first are also reported apart (``steady_*``)."""


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1000) if values else float("nan")


def record_profile(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the server ``pid`` into ``out`` (the "raw" collapsed-stack format, one
    line per stack with its sample count) until SIGINT. Only the thread holding the GIL is
    sampled (``--gil``): the server's threads share one interpreter, so what holds the GIL is
    what the others wait for; a thread waiting for a lock or the GIL is not counted."""
    spy = Path(sys.executable).with_name("py-spy")
    args = [str(spy), "record", "--gil", "--format", "raw", "-o", str(out), "-p", str(pid)]
    args += ["-r", "200"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(
    rate: float,
    seconds: float,
    nodes: int,
    workers: int,
    policy: str = DEFAULT_PROFILE,
    profile: Path | None = None,
    steady_after_s: float = STEADY_AFTER_S,
    db: str | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="xpupool-bench-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(cluster_yaml(nodes))
        port = free_port()
        proc = start_server(data, cluster, port, policy, db=db)
        url = f"http://127.0.0.1:{port}"
        try:
            admin = (data / "admin-token").read_text().strip()
            tokens = []
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as c:
                for name in ("bench-a", "bench-b"):
                    c.post("/v1/tenants", json={"name": name}).raise_for_status()
                    r = c.post(f"/v1/tenants/{name}/tokens", json={"name": "bench"})
                    tokens.append(r.raise_for_status().json()["token"])
            total = int(rate * seconds)
            spy = None if profile is None else record_profile(proc.pid, profile)
            plane_before = cpu_seconds(proc.pid)
            box_before = box_ticks()
            fronts_before = {pid: cpu_seconds(pid) for pid in child_pids(proc.pid)}
            sent = Sent()
            t0 = time.perf_counter() + 0.2
            threads = [
                threading.Thread(
                    target=submitter,
                    args=(url, tokens[w % 2], w, workers, rate, total, t0, sent),
                )
                for w in range(workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            steal = steal_fraction(box_before, box_ticks())
            if spy is not None:  # the submissions only, not the reads after them
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            still_pending = wait_settled(url, admin)
            # submitting and scheduling: the plane's process, and any it started
            plane_cpu_s = cpu_seconds(proc.pid) - plane_before
            fronts_cpu_s = sum(
                cpu_seconds(pid) - fronts_before.get(pid, 0.0) for pid in child_pids(proc.pid)
            )
            jobs = fetch_jobs(url, admin, sent.ids)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    latency: list[float] = []
    submitted_at: list[float] = []
    not_scheduled = 0
    unscheduled: list[str] = []  # "state: reason" of the first few, to say why
    for j in jobs:
        at = {e["state"]: e["at"] for e in reversed(j["events"])}  # first of each state
        if j["state"] != "scheduled" or "scheduled" not in at:
            not_scheduled += 1
            if len(unscheduled) < 3:
                unscheduled.append(f"job {j['id']} {j['state']}: {j.get('reason')}")
            continue
        latency.append(at["scheduled"] - at["pending"])
        submitted_at.append(at["pending"])
    first = min(submitted_at, default=0.0)
    steady = [
        lat for lat, t in zip(latency, submitted_at, strict=True) if t >= first + steady_after_s
    ]
    elapsed = sent.last - sent.first
    return {
        "store": "sqlite" if db is None else make_url(db).get_backend_name(),
        "nodes": nodes,
        "devices": nodes * 8,
        "target_rate_per_s": rate,
        "seconds": seconds,
        "workers": workers,
        "submitted": total,
        "acknowledged": len(sent.ids),
        "errors": len(sent.errors),
        "first_errors": sent.errors[:3],
        "achieved_rate_per_s": round(len(sent.ids) / elapsed, 1) if elapsed > 0 else None,
        "client_late_p99_ms": round(pct(sent.late_s, 99), 2),
        "server_cpu_ms_per_job": round(
            (plane_cpu_s + fronts_cpu_s) * 1000 / max(len(sent.ids), 1), 3
        ),
        "plane_cpu_ms_per_job": round(plane_cpu_s * 1000 / max(len(sent.ids), 1), 3),
        "cpu_steal_fraction": steal,
        "submit_rtt_p50_ms": round(pct(sent.rtt_s, 50), 2),
        "submit_rtt_p99_ms": round(pct(sent.rtt_s, 99), 2),
        "scheduled_latency_p50_ms": round(pct(latency, 50), 2),
        "scheduled_latency_p99_ms": round(pct(latency, 99), 2),
        "scheduled_latency_max_ms": round(max(latency, default=float("nan")) * 1000, 2),
        "steady_after_s": steady_after_s,
        "steady_p50_ms": round(pct(steady, 50), 2),
        "steady_p99_ms": round(pct(steady, 99), 2),
        "steady_max_ms": round(max(steady, default=float("nan")) * 1000, 2),
        "lost": len(sent.ids) - len(jobs),
        "not_scheduled": not_scheduled,
        "first_not_scheduled": unscheduled,
        "pending_at_end": still_pending,
    }


@contextlib.contextmanager
def postgres_servers(stores: list[str]) -> Iterator[dict[str, str]]:
    """Each PostgreSQL store of ``--db`` by its label, with the URL of its server: a URL as
    given, ``postgresql`` a throwaway server started the way the tests start theirs (``tests/
    postgres.py``), stopped on the way out."""
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for store in stores:
            if store == "sqlite":
                continue
            if store != "postgresql":
                urls[store] = store
                continue
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            postgres = importlib.import_module("postgres")  # initdb, pg_ctl as postgres

            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="xpupool-pg-")))
            server = postgres.start(root / "pg")
            stack.callback(server.stop)
            urls[store] = server.url("postgres")
        yield urls


def store_label(store: str, taken: dict[str, Any]) -> str:
    """``store``'s key in the output: ``sqlite``, ``postgresql``, or a second PostgreSQL URL's
    backend name with a number (``postgresql-2``)."""
    name = "sqlite" if store == "sqlite" else make_url(meta.driver_url(store)).get_backend_name()
    label, n = name, 1
    while label in taken:
        n += 1
        label = f"{name}-{n}"
    return label


def parse_stores(value: str) -> list[str]:
    """``--db``'s list: ``sqlite`` first whether named or not, each store once, each one
    ``sqlite``, ``postgresql`` or a PostgreSQL URL; a ``ValueError`` naming the item otherwise."""
    stores = ["sqlite"]
    for item in (part.strip() for part in value.split(",")):
        if item not in ("sqlite", "postgresql"):
            if not item.startswith(("postgresql://", "postgresql+", "postgres://")):
                raise ValueError(f"--db: {item!r} is not sqlite, postgresql or a PostgreSQL URL")
            try:
                make_url(meta.driver_url(item))
            except ArgumentError as exc:
                raise ValueError(f"--db: {item!r}: {exc}") from None
        if item not in stores:
            stores.append(item)
    return stores


def median_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One store's rounds as one row: each numeric figure the median of its rounds, anything else
    the first round's; every round under ``each``."""
    out: dict[str, Any] = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        out[key] = round(statistics.median(values), 3) if numeric else first
    out["rounds"] = len(rounds)
    out["each"] = rounds
    return out


def compare_stores(args: argparse.Namespace, stores: list[str]) -> dict[str, Any]:
    """:func:`run` on every store of ``stores``, ``args.rounds`` times, the stores taking turns
    within each round; each store's medians (:func:`median_rounds`)."""
    results: dict[str, list[dict[str, Any]]] = {}
    with postgres_servers(stores) as servers:
        labels: dict[str, str] = {}
        for store in stores:
            labels[store] = store_label(servers.get(store, store), labels)
        for _ in range(args.rounds):
            for store in stores:
                if store == "sqlite":
                    row = run_args(args, None)
                else:
                    with scratch_database(servers[store]) as db:
                        row = run_args(args, db)
                row["load_average"] = round(os.getloadavg()[0], 2)
                results.setdefault(labels[store], []).append(row)
                print(
                    f"{labels[store]}: {row['achieved_rate_per_s']}/s, scheduled p99 "
                    f"{row['scheduled_latency_p99_ms']} ms, load {row['load_average']}",
                    file=sys.stderr,
                    flush=True,
                )
    return {label: median_rounds(rows) for label, rows in results.items()}


@contextlib.contextmanager
def scratch_database(url: str) -> Iterator[str]:
    """A new database on the server of ``url`` for one run, dropped after it: its URL."""
    server = make_url(meta.driver_url(url))
    name = f"xpupool_bench_{os.getpid()}_{int(time.time())}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


SWEEP: tuple[tuple[int, float], ...] = (
    (200, 200.0),
    (1000, 200.0),
    (5000, 200.0),
    (10000, 200.0),
    (1000, 500.0),
    (1000, 1000.0),
)
"""(nodes, submissions/s): issue 25's table, the pool's size at 200/s, then the rate at 1,000."""


def sweep(
    seconds: float,
    workers: int,
    policy: str,
    steady_after_s: float = STEADY_AFTER_S,
) -> list[dict[str, Any]]:
    """One :func:`run` per row of :data:`SWEEP`, each on a fresh server and data dir."""
    rows = []
    for nodes, rate in SWEEP:
        row = run(
            rate,
            seconds,
            nodes,
            workers,
            policy,
            steady_after_s=steady_after_s,
        )
        row["load_average"] = os.getloadavg()[0]
        rows.append(row)
        print(table_line(row), file=sys.stderr, flush=True)
    return rows


TABLE_HEAD = (
    "| nodes | offered/s | achieved/s | scheduled p50 / p99 / max ms "
    "| steady p50 / p99 / max ms | submit rtt p99 ms | client late p99 ms "
    "| server CPU ms/job | lost | load |"
)


def table_line(row: dict[str, Any]) -> str:
    """One row of the issue's table, in Markdown (the sweep prints them as it goes)."""
    return (
        f"| {row['nodes']:,} | {row['target_rate_per_s']:g} | {row['achieved_rate_per_s']} "
        f"| {row['scheduled_latency_p50_ms']:g} / {row['scheduled_latency_p99_ms']:g} / "
        f"{row['scheduled_latency_max_ms']:g} | {row['steady_p50_ms']:g} / "
        f"{row['steady_p99_ms']:g} / {row['steady_max_ms']:g} | {row['submit_rtt_p99_ms']:g} "
        f"| {row['client_late_p99_ms']:g} | {row['server_cpu_ms_per_job']:g} "
        f"| {row['lost'] + row['not_scheduled']} "
        f"| {row.get('load_average', float('nan')):.2f} |"
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def box_ticks() -> list[int]:
    """The machine's CPU time by kind since boot (``/proc/stat``'s first line, in ticks)."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def steal_fraction(before: list[int], after: list[int]) -> float:
    """Of the CPU time between two :func:`box_ticks`, the share the hypervisor gave to other
    guests ("steal"): a shared VM's runs with a high steal ran on less than their cores."""
    spent = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(spent[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return round(spent[7] / total, 4) if total > 0 and len(spent) > 7 else 0.0


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started that still run."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def idle(nodes: int, seconds: float, settle_s: float = 10.0) -> dict[str, Any]:
    """The CPU an idle server costs with ``nodes`` simulated nodes and its in-process agent:
    started, left ``settle_s`` to register and compile, then measured over ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="xpupool-idle-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(cluster_yaml(nodes))
        proc = start_server(data, cluster, free_port(), agent=True)
        try:
            time.sleep(settle_s)
            before, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(seconds)
            used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - t0
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return {
        "nodes": nodes,
        "seconds": round(wall, 1),
        "cpu_seconds": round(used, 2),
        "core_fraction": round(used / wall, 4),
        "load_average": os.getloadavg()[0],
    }


def in_process(nodes: int, policy: str, requests: int = 3000, seed: int = 0) -> dict[str, object]:
    """The engine alone on the same pool and mix: ``requests`` placements one after another, after
    the compiled loops are loaded. What a placement costs the scheduler, without HTTP, SQLite or
    threads: wall-clock latencies, and ``steady_cpu_ms``, the CPU time per placement over the last
    two thirds (the workload learned); ``placements_digest`` names the nodes chosen, so that two
    builds that should place alike can be seen to. Nothing is released, so by 3,000 the A100s are
    nearly full and a few two-A100 requests may find no pair left (``placed`` counts what
    landed)."""
    from dataclasses import replace

    import yaml

    from xpupool.engine import ClusterState, Engine
    from xpupool.engine.fragmentation import kernels
    from xpupool.model.request_model import request_from_dict
    from xpupool.probes.cluster_file import parse_cluster

    kernels.warm()
    engine = Engine(ClusterState(parse_cluster(yaml.safe_load(cluster_yaml(nodes)))), policy)
    specs = [request_from_dict(spec) for weight, spec in MIX for _ in range(weight)]
    rng = np.random.default_rng(seed)
    latency, placed, nodes_taken = [], 0, []
    steady_from = requests // 3  # the steady CPU figure: after the workload is learned
    cpu_at = 0.0
    for i in range(requests):
        req = replace(specs[int(rng.integers(len(specs)))], name=f"r{i}")
        if i == steady_from:
            cpu_at = time.process_time()
        start = time.perf_counter()
        placement = engine.place(req)
        latency.append(time.perf_counter() - start)
        placed += placement.ok
        nodes_taken.append([a.node for a in placement.allocations])
    steady_cpu = (time.process_time() - cpu_at) / max(requests - steady_from, 1)
    ms = np.asarray(latency[1:]) * 1e3  # the first builds what the policy learns once
    return {
        "nodes": nodes,
        "policy": policy,
        "requests": requests,
        "placed": placed,
        "mean_ms": round(float(ms.mean()), 3),
        "p50_ms": round(float(np.median(ms)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(float(ms.max()), 1),
        "steady_cpu_ms": round(steady_cpu * 1e3, 3),
        "placements_digest": hashlib.sha256(repr(nodes_taken).encode()).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=200.0, help="submissions per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long to submit")
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes (8 cards each)")
    parser.add_argument("--workers", type=int, default=8, help="submitting threads")
    parser.add_argument("--policy", default=DEFAULT_PROFILE, help="the server's placement profile")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument(
        "--steady-after",
        type=float,
        default=STEADY_AFTER_S,
        help="also report the jobs submitted this many seconds after the first",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="issue 25's table: nodes and rates, one run each"
    )
    parser.add_argument("--table", action="store_true", help="with --sweep: Markdown, not JSON")
    parser.add_argument(
        "--idle", type=int, metavar="N", help="CPU of an idle server with N simulated nodes"
    )
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="with --idle")
    parser.add_argument(
        "--py-spy", type=Path, metavar="FILE", help="sample the server while submitting (raw)"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="time the engine alone on the same pool and mix"
    )
    parser.add_argument(
        "--db",
        metavar="STORES",
        help="also run on these stores, comma-separated: postgresql (a throwaway server) or a "
        "PostgreSQL server's URL (a database of its own); SQLite always runs, first",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --db: rounds, the stores taking turns"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: must be 1 or more")
    if args.sweep:
        print(
            f"{args.seconds:g} s per row, steady: the jobs submitted {args.steady_after:g} s or "
            f"more after the first; {TABLE_HEAD}",
            file=sys.stderr,
            flush=True,
        )
        rows = sweep(args.seconds, args.workers, args.policy, args.steady_after)
        if args.table:
            print("\n".join([TABLE_HEAD, "|---" * 10 + "|", *map(table_line, rows)]))
        else:
            print(json.dumps({"seconds_per_row": args.seconds, "rows": rows}))
        return
    if args.idle is not None:
        out = idle(args.idle, args.idle_seconds)
    elif args.in_process:
        out = in_process(args.nodes, args.policy)
    elif args.db:
        try:
            stores = parse_stores(args.db)
        except ValueError as exc:
            parser.error(str(exc))
        out = compare_stores(args, stores)
    else:
        out = run(
            args.rate,
            args.seconds,
            args.nodes,
            args.workers,
            args.policy,
            args.py_spy,
            args.steady_after,
        )
    print(json.dumps(out, indent=None if args.json else 2))


def run_args(args: argparse.Namespace, db: str | None) -> dict[str, Any]:
    """:func:`run` with the command line's settings, on ``db`` (None: SQLite)."""
    return run(
        args.rate,
        args.seconds,
        args.nodes,
        args.workers,
        args.policy,
        args.py_spy,
        args.steady_after,
        db,
    )


if __name__ == "__main__":
    main()
