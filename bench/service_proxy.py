"""Latency a service's proxy adds, and the requests per second it carries at saturation.

    python bench/service_proxy.py --json                   # 100, 500, 1,000 req/s; 3 runs
    python bench/service_proxy.py --rates 500 --runs 1 --seconds 5

Starts the Go stub server (``tests/fixtures/services/stub``) and a real ``xpupool up --no-agent``
on 127.0.0.1 over the example pool, whose one service (tenant ``bench``, service ``stub``) is the
stub; a fixed-rate load generator in a process of its own (``tests/fixtures/services/load``, Go:
open loop, each request's latency measured from its due time, so a proxy that falls behind shows
as latency, not as a lower rate) sends ``GET /v1/models`` to the stub directly and through
``/v1/services/stub/proxy/v1/models`` in turn, at each ``--rates`` for ``--seconds``, ``--runs``
times; while it does, a thread submits ``--jobs-per-s`` small jobs, so the plane schedules as it
proxies. Then a closed loop of ``--concurrency`` clients gives the requests per second at
saturation, direct and through the proxy.

Reports per rate the medians over the runs of the direct and proxied p50/p99 (ms), the added
p50/p99 (proxied minus direct, per run, then the median), the rate achieved and the errors; and
the saturation rates. Goal (issue 47): p99 added <= 2 ms at 500 requests/s, and the proxy not
the bottleneck below 1,000 requests/s.

Until the service controller finds replicas (issue 47, its other part), nothing in the product
names the stub a service's replica: the server is ``xpupool up`` started through its own CLI by a
small launcher (``--serve``) that gives the plane a static list of ready endpoints (the stub)
before it serves. Everything else is ``xpupool up`` as shipped.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster-mixed.yaml"
TENANT, SERVICE = "bench", "stub"
STUB_ENV = "XPUPOOL_BENCH_STUB"  # host:port of the stub, for the launcher


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binaries() -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from container_images import (  # type: ignore[import-not-found]  # tests/, not a package
        LOAD_SOURCE,
        STUB_SOURCE,
        go_binary,
    )

    return go_binary(STUB_SOURCE), go_binary(LOAD_SOURCE)


def serve(argv: Sequence[str]) -> None:
    """The launcher (``--serve``, in the server's process): ``xpupool up ARGV`` whose plane's
    service ``bench/stub`` has the stub as its one ready endpoint."""
    from xpupool.cli import main as cli_main
    from xpupool.server import up
    from xpupool.server.service_endpoints import Endpoint

    host, _, port = os.environ[STUB_ENV].rpartition(":")
    stub = (Endpoint(job_id=0, replica=0, host=host, port=int(port)),)

    class StubEndpoints:
        def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
            return stub if (tenant, service) == (TENANT, SERVICE) else ()

    opened = up.open_plane

    def open_plane(cfg: Any, owner: Any = None) -> Any:
        plane = opened(cfg, owner)
        plane.service_endpoints = StubEndpoints()
        return plane

    up.open_plane = open_plane
    cli_main(["up", *argv])


def _start(data: Path, port: int, stub_port: int, http_workers: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, __file__, "--serve", "--no-agent", "--data", str(data)]
    args += ["--port", str(port), "--cluster", str(CLUSTER)]
    args += ["--http-workers", str(http_workers)] if http_workers else []
    args += ["--rate-limit", "0", "--address-rate-limit", "0", "--connections-per-address", "0"]
    env = {**os.environ, STUB_ENV: f"127.0.0.1:{stub_port}"}
    log = (data.parent / "server.log").open("ab")
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((data.parent / "server.log").read_text()[-3000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("xpupool up did not start in 120 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


class Submitter(threading.Thread):
    """Small jobs at a fixed rate while the load runs: the plane schedules as it proxies."""

    def __init__(self, url: str, token: str, per_s: float) -> None:
        super().__init__(daemon=True, name="bench-submit")
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.per_s = per_s
        self.stopped = threading.Event()
        self.sent = 0
        self.refused = 0

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopped.is_set():
            due = start + self.sent / self.per_s
            self.stopped.wait(max(0.0, due - time.monotonic()))
            job = {"spec": "nvidia:1 mem=1Gi", "command": ["true"]}
            r = self.client.post("/v1/jobs", json=job)
            self.sent += 1
            self.refused += r.status_code != 201


def _load(load: Path, url: str, token: str | None, seconds: float, **how: float) -> dict[str, Any]:
    args = [str(load), "-url", url, "-seconds", str(seconds)]
    if token:
        args += ["-token", token]
    for key, value in how.items():
        args += [f"-{key}", str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120, check=True)
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    stub_bin, load_bin = _binaries()
    with tempfile.TemporaryDirectory(prefix="xpupool-bench-proxy-") as tmp:
        stub_port, port = _free_port(), _free_port()
        stub = subprocess.Popen(
            [str(stub_bin), "-port", str(stub_port)],
            env={**os.environ, "HOST": "127.0.0.1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = _start(Path(tmp) / "data", port, stub_port, args.http_workers)
        try:
            return _measure(args, load_bin, Path(tmp) / "data", port, stub_port)
        finally:
            _stop(server)
            stub.terminate()
            stub.wait(10)


def _measure(
    args: argparse.Namespace, load_bin: Path, data: Path, port: int, stub_port: int
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    admin = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
    httpx.post(f"{url}/v1/tenants", json={"name": TENANT}, headers=admin).raise_for_status()
    r = httpx.post(f"{url}/v1/tenants/{TENANT}/tokens", json={"name": "bench"}, headers=admin)
    token = r.raise_for_status().json()["token"]
    direct = f"http://127.0.0.1:{stub_port}/v1/models"
    proxied = f"{url}/v1/services/{SERVICE}/proxy/v1/models"
    _load(load_bin, proxied, token, 2, rate=100)  # warm: connections, caches, the token
    submitter = Submitter(url, token, args.jobs_per_s)
    submitter.start()
    rows: dict[int, dict[str, list[float]]] = {}
    try:
        for _ in range(args.runs):
            for rate in args.rates:
                d = _load(load_bin, direct, None, args.seconds, rate=rate)
                p = _load(load_bin, proxied, token, args.seconds, rate=rate)
                row = rows.setdefault(rate, {})
                for key, value in (
                    ("direct_p50_ms", d["p50_ms"]),
                    ("direct_p99_ms", d["p99_ms"]),
                    ("proxy_p50_ms", p["p50_ms"]),
                    ("proxy_p99_ms", p["p99_ms"]),
                    ("added_p50_ms", p["p50_ms"] - d["p50_ms"]),
                    ("added_p99_ms", p["p99_ms"] - d["p99_ms"]),
                    ("proxy_rate", p["rate"]),
                    ("proxy_errors", p["errors"]),
                ):
                    row.setdefault(key, []).append(value)
        saturation = {
            "direct": _load(load_bin, direct, None, args.seconds, concurrency=args.concurrency)[
                "rate"
            ],
            "proxy": _load(load_bin, proxied, token, args.seconds, concurrency=args.concurrency)[
                "rate"
            ],
        }
    finally:
        submitter.stopped.set()
        submitter.join(30)
    return {
        "runs": args.runs,
        "seconds": args.seconds,
        "http_workers": args.http_workers,
        "jobs_submitted": submitter.sent,
        "jobs_refused": submitter.refused,
        "rates": {
            str(rate): {key: _median(values) for key, values in row.items()}
            for rate, row in rows.items()
        },
        "saturation_rps": {k: round(v, 1) for k, v in saturation.items()},
        "concurrency": args.concurrency,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[100, 500, 1000]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per rate and target")
    parser.add_argument("--jobs-per-s", type=float, default=10.0, help="submissions meanwhile")
    parser.add_argument("--concurrency", type=int, default=32, help="saturation's clients")
    parser.add_argument("--http-workers", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"runs: {result['runs']} x {result['seconds']} s per rate and target; "
        f"jobs submitted meanwhile: {result['jobs_submitted']}"
    )
    for rate, row in result["rates"].items():
        print(
            f"{rate:>5}/s  direct p50 {row['direct_p50_ms']:.2f} p99 {row['direct_p99_ms']:.2f}  "
            f"proxy p50 {row['proxy_p50_ms']:.2f} p99 {row['proxy_p99_ms']:.2f}  "
            f"added p50 {row['added_p50_ms']:.2f} p99 {row['added_p99_ms']:.2f} ms  "
            f"errors {row['proxy_errors']:.0f}"
        )
    sat = result["saturation_rps"]
    print(
        f"saturation ({result['concurrency']} clients): direct {sat['direct']}/s, "
        f"proxy {sat['proxy']}/s"
    )


if __name__ == "__main__":
    main()
