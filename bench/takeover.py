"""Take-over time of a standby plane: active plane lost -> the standby serving.

    python bench/takeover.py --db postgresql://user@host/db [--trials 5] [--signal SIGKILL]
    python bench/takeover.py --db URL --build before=../wt-before   # and the build before


Each trial runs on a database of its own that it creates on the server of ``--db`` and drops
after (``bench/api.py``'s ``scratch_database``): ``xpupool up --db`` (the active plane) and
``xpupool up --standby --db`` on 127.0.0.1 with the default store lease, waits until the
standby answers 503 naming the owner, sends ``--signal`` to the active plane, and times until the
standby's ``/healthz`` answers 200 (polled every 50 ms). Reports each trial and their median and
maximum, with the store lease's timings (docs/postgresql.md). Every build named with ``--build
NAME=CHECKOUT`` runs the same trials with ``PYTHONPATH`` set to that checkout's ``src`` (the
interpreter is this one), trials alternating between builds, so that a comparison is made in one
run under one load.
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
from xpupool.server.ownership import CLOCK_SKEW_S, DEFAULT_STORE_LEASE_S, RENEW_FRACTION
from xpupool.server.standby import POLL_S

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


def start(data: Path, port: int, db: str, src: Path, *extra: str) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True, exist_ok=True)
    argv = [*CLI, "--db", db, "--data", str(data), "--port", str(port), *extra]
    env = {**os.environ, "PYTHONPATH": str(src)}
    with (data / "server.log").open("ab") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def trial(server_url: str, sig: signal.Signals, src: Path) -> float:
    """One take-over; its seconds from the signal to the standby's 200."""
    with (
        tempfile.TemporaryDirectory(prefix="xpupool-takeover-") as tmp,
        scratch_database(server_url) as db,
    ):
        ports = free_port(), free_port()
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        active = start(Path(tmp) / "a", ports[0], db, src)
        standby: subprocess.Popen[bytes] | None = None
        try:
            wait(lambda: health(urls[0])[0] == 200, "the active plane")
            standby = start(Path(tmp) / "b", ports[1], db, src, "--standby")
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
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME=CHECKOUT",
        help="a checkout to time beside this one (repeatable); default: this checkout only",
    )
    args = parser.parse_args()
    sig = signal.Signals[args.signal]
    builds = {"this": Path(__file__).resolve().parents[1] / "src"}
    for item in args.build:
        name, sep, path = item.partition("=")
        src = Path(path).resolve() / "src"
        if not sep or not name or not (src / "xpupool").is_dir():
            parser.error(f"--build: expected NAME=CHECKOUT with CHECKOUT/src/xpupool, not {item!r}")
        builds[name] = src
    took: dict[str, list[float]] = {name: [] for name in builds}
    loads = []
    for k in range(args.trials):
        for name, src in builds.items():
            loads.append(os.getloadavg()[0])
            took[name].append(round(trial(args.db, sig, src), 2))
            print(f"{name} trial {k + 1}: {took[name][-1]} s", file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "signal": args.signal,
                "store_lease_s": DEFAULT_STORE_LEASE_S,
                "renew_every_s": DEFAULT_STORE_LEASE_S * RENEW_FRACTION,
                "clock_allowance_s": CLOCK_SKEW_S,
                "standby_poll_s": POLL_S,
                "builds": {
                    name: {
                        "takeover_s": got,
                        "median_s": statistics.median(got),
                        "max_s": max(got),
                    }
                    for name, got in took.items()
                },
                "load_average": [min(loads), max(loads)],
            }
        )
    )


if __name__ == "__main__":
    main()
