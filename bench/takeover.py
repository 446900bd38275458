"""Take-over time of a standby plane: active plane lost -> the standby serving.

    python bench/takeover.py --db postgresql://user@host/db [--trials 5] [--signal SIGKILL]

Each trial runs on a database of its own that it creates on the server of ``--db`` and drops
after (``bench/api.py``'s ``scratch_database``): ``xpupool up --db`` (the active plane) and
``xpupool up --standby --db`` on 127.0.0.1 with the default store lease, waits until the
standby answers 503 naming the owner, sends ``--signal`` to the active plane, and times until the
standby's ``/healthz`` answers 200 (polled every 50 ms). Reports each trial and their median and
maximum, with the store lease's timings (docs/postgresql.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from api import free_port, scratch_database

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()", "up", "--no-agent"]


def health(url: str) -> tuple[int, str]:
    try:
        r = httpx.get(f"{url}/healthz", timeout=1.0)
    except httpx.TransportError:
        return 0, ""
    return r.status_code, r.text


def wait(check: object, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def start(data: Path, port: int, db: str, *extra: str) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True, exist_ok=True)
    argv = [*CLI, "--db", db, "--data", str(data), "--port", str(port), *extra]
    with (data / "server.log").open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def trial(server_url: str, sig: signal.Signals) -> float:
    """One take-over; its seconds from the signal to the standby's 200."""
    with (
        tempfile.TemporaryDirectory(prefix="xpupool-takeover-") as tmp,
        scratch_database(server_url) as db,
    ):
        ports = free_port(), free_port()
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        active = start(Path(tmp) / "a", ports[0], db)
        standby: subprocess.Popen[bytes] | None = None
        try:
            wait(lambda: health(urls[0])[0] == 200, "the active plane")
            standby = start(Path(tmp) / "b", ports[1], db, "--standby")
            wait(lambda: "owned by another" in health(urls[1])[1], "the standby")
            lost = time.monotonic()
            os.killpg(active.pid, sig)
            wait(lambda: health(urls[1])[0] == 200, "the take-over")
            return time.monotonic() - lost
        finally:
            for proc in (active, standby):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--db", required=True, metavar="URL", help="a PostgreSQL server's URL")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--signal", default="SIGKILL", choices=["SIGKILL", "SIGSTOP"])
    args = parser.parse_args()
    sig = signal.Signals[args.signal]
    took = []
    for k in range(args.trials):
        took.append(round(trial(args.db, sig), 2))
        print(f"trial {k + 1}: {took[-1]} s", file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "signal": args.signal,
                "store_lease_s": 10.0,
                "renew_every_s": 2.0,
                "clock_allowance_s": 2.0,
                "standby_poll_s": 0.5,
                "takeover_s": took,
                "median_s": statistics.median(took),
                "max_s": max(took),
                "load_average": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
