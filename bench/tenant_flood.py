"""What one tenant's flood costs the others: another tenant's submit round trip, with and without.

    python bench/tenant_flood.py --json                  # 200 nodes, victim at 20/s for 10 s
    python bench/tenant_flood.py --nodes 500 --rate 50 --seconds 20

Starts a real ``xpupool up --no-agent`` on 127.0.0.1 (the pool and helpers of ``bench/api.py``)
with two tenants. The victim submits small fractional jobs open-loop at ``--rate``, and a churn
thread cancels each of them about a second later, as jobs ending would: every release makes the
scheduler try each pending job again, which is what a flood of pending jobs makes expensive.
The victim's submit round trip is measured three times:

- ``baseline``: no flood;
- ``flood_default_limits``: the flooder first fills its queue as far as the default per-tenant
  limits let it, with gangs of whole nodes (``any:8``) one replica more than the pool has nodes
  (each try places every node, then fails and rolls back: the most a job can cost) up to
  ``max_replicas_per_job``, then single jobs no node can take, until refused (429/403);
- ``flood_raised_limits``: the admin has raised the flooder's limits and it queues jobs of 10,000
  replicas, the case issue 18 reported (the victim's submits many times slower with them than
  without; current figures in docs/benchmarks.md).

Each phase reports p50/p99/max (ms), how many victim submissions failed, and the flood admitted
to the queue. The flood is cancelled between phases.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from api import cluster_yaml, fetch_jobs, free_port, pct, start_server

VICTIM_SPEC = "any:1 mem=2Gi cores=5%"
NEVER_FITS = "cpu=100000"  # more cores than any node: tried, refused at the first filter
RAISED = {"max_pending_jobs": 10_000, "max_replicas_per_job": 10_000, "max_pending_replicas": 10**7}


class Victim:
    """Open-loop submissions at ``rate`` on one keep-alive connection; a churn thread cancels
    each job ``linger_s`` after it was acknowledged (a release, so the next pass retries all)."""

    def __init__(self, url: str, token: str, rate: float, linger_s: float = 1.0) -> None:
        self.url, self.token, self.rate, self.linger_s = url, token, rate, linger_s
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.rtt_s: list[float] = []
        self.errors: list[str] = []
        self.ids: list[int] = []
        self.to_cancel: deque[tuple[float, int]] = deque()
        self.lock = threading.Lock()

    def _conn(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.url)
        return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)

    def submit_for(self, seconds: float) -> None:
        conn = self._conn()
        t0 = time.perf_counter()
        try:
            for k in range(int(self.rate * seconds)):
                wait = t0 + k / self.rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                body = json.dumps({"command": ["true"], "spec": VICTIM_SPEC, "name": f"v{k}"})
                start = time.perf_counter()
                try:
                    conn.request("POST", "/v1/jobs", body=body, headers=self.headers)
                    r = conn.getresponse()
                    data = r.read()
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self.errors.append(repr(exc))
                    continue
                elapsed = time.perf_counter() - start
                if r.status != 201:
                    self.errors.append(f"{r.status} {data[:200]!r}")
                    continue
                job_id = int(json.loads(data)["id"])
                with self.lock:
                    self.rtt_s.append(elapsed)
                    self.ids.append(job_id)
                    self.to_cancel.append((time.monotonic(), job_id))
        finally:
            conn.close()

    def churn(self, stop: threading.Event) -> None:
        conn = self._conn()
        try:
            while not stop.is_set():
                with self.lock:
                    due = (
                        self.to_cancel and self.to_cancel[0][0] + self.linger_s <= time.monotonic()
                    )
                    job_id = self.to_cancel.popleft()[1] if due else None
                if job_id is None:
                    time.sleep(0.02)
                    continue
                try:
                    conn.request("POST", f"/v1/jobs/{job_id}/cancel", headers=self.headers)
                    conn.getresponse().read()
                except (OSError, http.client.HTTPException):
                    conn.close()
        finally:
            conn.close()

    def phase(self, seconds: float) -> dict[str, Any]:
        self.rtt_s, self.errors, self.ids = [], [], []
        stop = threading.Event()
        churn = threading.Thread(target=self.churn, args=(stop,), daemon=True)
        churn.start()
        self.submit_for(seconds)
        stop.set()
        churn.join()
        placed: list[float] = []
        for job in fetch_jobs(self.url, self.token, self.ids):
            at = {e["state"]: e["at"] for e in reversed(job["events"])}  # first of each state
            if "scheduled" in at:
                placed.append(at["scheduled"] - at["pending"])
        return {
            "scheduled_latency_p50_ms": round(pct(placed, 50), 2),
            "scheduled_latency_p99_ms": round(pct(placed, 99), 2),
            "not_scheduled_before_cancel": len(self.ids) - len(placed),
            "submitted": len(self.rtt_s) + len(self.errors),
            "errors": len(self.errors),
            "first_errors": self.errors[:2],
            "submit_rtt_p50_ms": round(pct(self.rtt_s, 50), 2),
            "submit_rtt_p99_ms": round(pct(self.rtt_s, 99), 2),
            "submit_rtt_max_ms": round(max(self.rtt_s, default=float("nan")) * 1000, 2),
        }


def flood(c: httpx.Client, replicas: int, max_jobs: int) -> dict[str, Any]:
    """Gangs of ``replicas`` whole nodes, then jobs no node can take, until refused or
    ``max_jobs``. Returns what was queued."""
    gang = f"any:8 replicas={replicas}"
    queued: dict[str, Any] = {"gangs": 0, "singles": 0, "replicas": 0}
    for spec, kind in ((gang, "gangs"), (NEVER_FITS, "singles")):
        queued[f"{kind}_stopped_by"] = f"{max_jobs} jobs"
        while queued["gangs"] + queued["singles"] < max_jobs:
            r = c.post("/v1/jobs", json={"command": ["true"], "spec": spec})
            if r.status_code != 201:
                queued[f"{kind}_stopped_by"] = f"{r.status_code} {r.json().get('reason', '')[:100]}"
                break
            queued[kind] += 1
            queued["replicas"] += int(r.json()["request"].get("replicas", 1))
    return {"gang": gang, **queued}


def cancel_pending(admin: httpx.Client, tenant: str) -> None:
    while True:
        listed = admin.get("/v1/jobs", params={"tenant": tenant, "state": "pending", "limit": 1000})
        ids = [j["id"] for j in listed.json()]
        if not ids:
            return
        for i in ids:
            admin.post(f"/v1/jobs/{i}/cancel")


def progress(phase: str, result: dict[str, Any]) -> None:
    print(f"{phase}: {json.dumps(result)}", file=sys.stderr, flush=True)


def run(nodes: int, rate: float, seconds: float, max_flood_jobs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="xpupool-flood-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(cluster_yaml(nodes))
        port = free_port()
        proc: subprocess.Popen[bytes] = start_server(data, cluster, port)
        url = f"http://127.0.0.1:{port}"
        out: dict[str, Any] = {"nodes": nodes, "devices": nodes * 8, "rate_per_s": rate}
        out["seconds_per_phase"] = seconds
        try:
            admin_token = (data / "admin-token").read_text().strip()
            auth = {"Authorization": f"Bearer {admin_token}"}
            with httpx.Client(base_url=url, headers=auth, timeout=300) as admin:
                tokens = {}
                for name in ("victim", "flooder"):
                    admin.post("/v1/tenants", json={"name": name}).raise_for_status()
                    r = admin.post(f"/v1/tenants/{name}/tokens", json={"name": "bench"})
                    tokens[name] = r.raise_for_status().json()["token"]
                # the flood is work nothing in the pool can hold: its queue keeps it (a pool
                # that grows) instead of refusing it at submission
                flood_queue = {"name": "flooder", "tenant": "flooder", "allow_unfittable": True}
                admin.put("/v1/queues/flooder", json=flood_queue).raise_for_status()
                limits = {k: v for k, v in admin.get("/v1/tenants").json()[0].items() if "max" in k}
                out["default_limits"] = limits
                victim = Victim(url, tokens["victim"], rate)
                out["baseline"] = victim.phase(seconds)
                progress("baseline", out["baseline"])
                flooder_auth = {"Authorization": f"Bearer {tokens['flooder']}"}
                with httpx.Client(base_url=url, headers=flooder_auth, timeout=300) as fc:
                    gang = min(limits["max_replicas_per_job"], nodes + 1)  # one more than fits
                    queued = flood(fc, gang, max_flood_jobs)
                    out["flood_default_limits"] = {"queued": queued, **victim.phase(seconds)}
                    progress("flood, default limits", out["flood_default_limits"])
                    cancel_pending(admin, "flooder")
                    admin.patch("/v1/tenants/flooder", json=RAISED).raise_for_status()
                    queued = flood(fc, 10_000, max_flood_jobs)
                    out["flood_raised_limits"] = {"queued": queued, **victim.phase(seconds)}
                    progress("flood, raised limits", out["flood_raised_limits"])
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes (8 cards each)")
    parser.add_argument("--rate", type=float, default=20.0, help="victim submissions per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument(
        "--max-flood-jobs", type=int, default=1000, help="most jobs the flooder queues per phase"
    )
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    out = run(args.nodes, args.rate, args.seconds, args.max_flood_jobs)
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
