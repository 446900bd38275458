"""Latency a service's proxy adds, and the requests per second it carries at saturation.

    python bench/service_proxy.py --json                   # 100, 500, 1,000 req/s; 3 runs
    python bench/service_proxy.py --rates 500 --runs 1 --seconds 5
    python bench/service_proxy.py --json --compare base=/path/to/checkout   # that build too
    python bench/service_proxy.py --json --proxy-process --compare base=/path/to/checkout

Starts a real ``xpupool up`` (its in-process agent hosting one node) on 127.0.0.1 and creates,
through the API, a service (tenant ``bench``, service ``stub``) whose one replica is the Go stub
server (``tests/fixtures/services/stub``) run by the agent as a host process (the binary copied
under ``--stub-dir``, which all may read: the replica runs as a uid of its own, with a /tmp and
/var/tmp of its own); it waits until the service is ready, and takes the replica's address from the
service. A fixed-rate load generator in a process of its own (``tests/fixtures/services/load``, Go:
open loop, each request's latency measured from its due time, so a proxy that falls behind shows as
latency, not as a lower rate) sends ``GET /v1/models`` to the replica directly and through
``/v1/services/stub/proxy/v1/models`` in turn, at each ``--rates`` for ``--seconds``, ``--runs``
times; while it does, a thread submits ``--jobs-per-s`` small jobs asking for the pool's one card
(a second, simulated node's): the first holds it, the others stay pending, so every scheduling pass
of the plane considers more of them as it proxies. Then a closed loop of ``--concurrency`` clients
gives the requests per second at saturation, direct and through the proxy.

Reports per rate the medians over the runs of the direct and proxied p50/p99 (ms), the added
p50/p99 (proxied minus direct, per run, then the median), the rate achieved, the errors and the CPU
time the proxying process spent per proxied request (ms: the proxy's own process's, or, through the
API's port, the plane's whole process's, scheduling included; from /proc; a figure a loaded machine
moves less than latency); and the saturation rates. ``--proxy-process``: this build's proxied
requests go to the proxy's own process (``xpupool up --proxy-port``) instead of the API's port.
``--compare NAME=CHECKOUT`` measures the server of another checkout's ``src`` the same way (through
its API's port), after this one (one JSON object per build). Goal (issue 47): p99 added <= 2 ms at
500 requests/s, and the proxy not the bottleneck below 1,000 requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TENANT, SERVICE = "bench", "stub"
CLUSTER = """\
nodes:
  - {name: box, cpu: 8, memory: 16Gi}
  - name: gpu
    cpu: 8
    memory: 16Gi
    devices:
      - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 1, memory: 80Gi}
"""
UP = "from xpupool.cli import main; main()"


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


def _start(data: Path, port: int, src: Path, proxy_port: int | None) -> subprocess.Popen[bytes]:
    """``xpupool up`` of the checkout whose package is under ``src`` (with the proxy's own
    process on ``proxy_port`` unless None)."""
    data.parent.joinpath("cluster.yaml").write_text(CLUSTER)
    args = [sys.executable, "-c", UP, "up", "--data", str(data), "--port", str(port)]
    args += ["--cluster", str(data.parent / "cluster.yaml")]
    if proxy_port is not None:
        args += ["--proxy-port", str(proxy_port)]
    args += ["--rate-limit", "0", "--address-rate-limit", "0", "--connections-per-address", "0"]
    env = {**os.environ, "PYTHONPATH": str(src)}
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
        self.first_refusal = ""

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopped.is_set():
            due = start + self.sent / self.per_s
            self.stopped.wait(max(0.0, due - time.monotonic()))
            # the pool's one card: the first job holds it, the others stay pending, and every
            # scheduling pass considers them (jobs that ran would each start a supervisor
            # process, which is not what this measures)
            job = {"spec": "nvidia:1", "command": ["sleep", "3600"]}
            r = self.client.post("/v1/jobs", json=job)
            self.sent += 1
            if r.status_code != 201:
                self.refused += 1
                self.first_refusal = self.first_refusal or f"{r.status_code} {r.text[:200]}"


def _load(load: Path, url: str, token: str | None, seconds: float, **how: float) -> dict[str, Any]:
    args = [str(load), "-url", url, "-seconds", str(seconds)]
    if token:
        args += ["-token", token]
    for key, value in how.items():
        args += [f"-{key}", str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120, check=True)
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _proxy_cpu_s(server: int, own_process: bool) -> float:
    """CPU seconds (user and system) the process that serves the proxied requests has used:
    the proxy's own process (the plane's child, by its module), else the plane's own."""
    if not own_process:
        return _cpu_s(Path(f"/proc/{server}"))
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) != server or b"proxy_main" not in (proc / "cmdline").read_bytes():
                continue
            total += _cpu_s(proc)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return total


def _cpu_s(proc: Path) -> float:
    """User and system CPU seconds of the process at ``proc`` (``/proc/PID``)."""
    stat = (proc / "stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def run(args: argparse.Namespace, src: Path, own_process: bool) -> dict[str, Any]:
    """One build's measures: ``xpupool up`` from ``src``, proxying through its own process
    when ``own_process``."""
    stub_bin, load_bin = _binaries()
    # the replica runs as a uid of its own with /tmp and /var/tmp of its own: its binary lies
    # outside them, readable by all
    args.stub_dir.mkdir(parents=True, exist_ok=True)
    shared = Path(tempfile.mkdtemp(prefix="xpupool-bench-stub-", dir=args.stub_dir))
    shared.chmod(0o755)
    stub = shared / "stub"
    shutil.copy(stub_bin, stub)
    stub.chmod(0o755)
    with tempfile.TemporaryDirectory(prefix="xpupool-bench-proxy-") as tmp:
        port = _free_port()
        proxy_port = _free_port() if own_process else None
        server = _start(Path(tmp) / "data", port, src, proxy_port)
        try:
            return _measure(args, load_bin, stub, Path(tmp) / "data", port, proxy_port, server.pid)
        finally:
            _remove_service(f"http://127.0.0.1:{port}", Path(tmp) / "data")
            _stop(server)
            shutil.rmtree(shared, ignore_errors=True)


def _remove_service(url: str, data: Path) -> None:
    """Delete the service, cancel the job that holds the card, and wait for both to end: a
    replica outlives its server."""
    admin = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
    try:
        httpx.delete(f"{url}/v1/services/{SERVICE}?tenant={TENANT}", headers=admin, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            holding = [
                j
                for state in ("scheduled", "running")
                for j in httpx.get(
                    f"{url}/v1/jobs", params={"state": state}, headers=admin, timeout=30
                ).json()
            ]
            if not holding:
                return
            for job in holding:
                if not str(job.get("name", "")).startswith(f"{SERVICE}-"):
                    httpx.post(f"{url}/v1/jobs/{job['id']}/cancel", headers=admin, timeout=30)
            time.sleep(0.5)
    except (httpx.HTTPError, ValueError):
        pass  # the server is gone: its replica is said in the report


def _ready_replica(url: str, token: str, stub: Path) -> str:
    """Create the service of the stub and wait until its replica is ready: its address."""
    auth = {"Authorization": f"Bearer {token}"}
    body = {
        "name": SERVICE,
        "job": {"command": [str(stub)], "spec": "cpu=2"},
        "readiness": {"path": "/health", "interval_s": 1, "timeout_s": 1},
    }
    httpx.post(f"{url}/v1/services", json=body, headers=auth, timeout=60).raise_for_status()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = httpx.get(f"{url}/v1/services/{SERVICE}", headers=auth, timeout=60).json()
        ready = [r for r in found.get("replicas", []) if r["ready"]]
        if found.get("state") == "ready" and ready:
            return f"{ready[0]['host']}:{ready[0]['port']}"
        time.sleep(0.2)
    raise RuntimeError(f"service {SERVICE} not ready in 120 s: {found}")


def _measure(
    args: argparse.Namespace,
    load_bin: Path,
    stub: Path,
    data: Path,
    port: int,
    proxy_port: int | None,
    server: int,
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    admin = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
    httpx.post(
        f"{url}/v1/tenants", json={"name": TENANT}, headers=admin, timeout=60
    ).raise_for_status()
    r = httpx.post(
        f"{url}/v1/tenants/{TENANT}/tokens", json={"name": "bench"}, headers=admin, timeout=60
    )
    token = r.raise_for_status().json()["token"]
    direct = f"http://{_ready_replica(url, token, stub)}/v1/models"
    proxy_base = url if proxy_port is None else f"http://127.0.0.1:{proxy_port}"
    proxied = f"{proxy_base}/v1/services/{SERVICE}/proxy/v1/models"
    _load(load_bin, proxied, token, 2, rate=100)  # warm: connections, caches, the token
    submitter = Submitter(url, token, args.jobs_per_s)
    submitter.start()
    rows: dict[int, dict[str, list[float]]] = {}
    try:
        for _ in range(args.runs):
            for rate in args.rates:
                d = _load(load_bin, direct, None, args.seconds, rate=rate)
                cpu = _proxy_cpu_s(server, proxy_port is not None)
                p = _load(load_bin, proxied, token, args.seconds, rate=rate)
                cpu = _proxy_cpu_s(server, proxy_port is not None) - cpu
                per_request_ms = 1000 * cpu / max(1.0, p["rate"] * args.seconds)
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
                    ("proxy_cpu_ms_per_request", per_request_ms),
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
        "proxy": "own process" if proxy_port is not None else "API's port",
        "jobs_submitted": submitter.sent,
        "jobs_refused": submitter.refused,
        "first_refusal": submitter.first_refusal,
        "rates": {
            str(rate): {key: _median(values) for key, values in row.items()}
            for rate, row in rows.items()
        },
        "saturation_rps": {k: round(v, 1) for k, v in saturation.items()},
        "concurrency": args.concurrency,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[100, 500, 1000]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per rate and target")
    parser.add_argument("--jobs-per-s", type=float, default=10.0, help="submissions meanwhile")
    parser.add_argument("--concurrency", type=int, default=32, help="saturation's clients")
    parser.add_argument(
        "--proxy-process",
        action="store_true",
        help="this build proxies through its own process (xpupool up --proxy-port)",
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=CHECKOUT",
        help="measure that checkout's server too, after this one",
    )
    parser.add_argument(
        "--stub-dir",
        type=Path,
        default=ROOT / "build",
        help="where the replica's binary is copied: every user must reach it, not under /tmp",
    )
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    builds = [("this", ROOT / "src", args.proxy_process)]
    for spec in args.compare:
        name, _, checkout = spec.partition("=")
        builds.append((name, Path(checkout).resolve() / "src", False))
    results = {name: run(args, src, own) for name, src, own in builds}
    if args.json:
        print(json.dumps(results))
        return
    for name, result in results.items():
        print(
            f"{name}: runs: {result['runs']} x {result['seconds']} s per rate and target; "
            f"proxy on {result['proxy']}; "
            "jobs submitted meanwhile: "
            f"{result['jobs_submitted']}"
        )
        for rate, row in result["rates"].items():
            print(
                f"{rate:>5}/s  direct p50 {row['direct_p50_ms']:.2f} "
                f"p99 {row['direct_p99_ms']:.2f}  proxy p50 {row['proxy_p50_ms']:.2f} "
                f"p99 {row['proxy_p99_ms']:.2f}  added p50 {row['added_p50_ms']:.2f} "
                f"p99 {row['added_p99_ms']:.2f} ms  achieved {row['proxy_rate']:.1f}/s  "
                f"errors {row['proxy_errors']:.0f}  "
                f"proxy CPU {row['proxy_cpu_ms_per_request']:.2f} ms/request"
            )
        sat = result["saturation_rps"]
        print(
            f"saturation ({result['concurrency']} clients): direct {sat['direct']}/s, "
            f"proxy {sat['proxy']}/s"
        )


if __name__ == "__main__":
    main()
