"""How long a user waits for xpupool to start: the server, an agent, and one CLI command.

    python bench/startup.py --json                            # this checkout, 3 rounds
    python bench/startup.py --build base=../wt-base --json    # and the build before, alternating

``xpupool up --cluster examples/cluster-mixed.yaml`` (what ``make run`` starts: the cluster file's
simulated nodes and the in-process agent for this host) is started as its own process on a free
port with a fresh data dir, and timed from the spawn to three answers: the first 200 on
``/healthz`` (``healthz``), the first 200 on ``/v1/nodes`` (``nodes``), and the **first job
placed** (``first_job``: a tenant and its token are created, ``any`` is submitted, and the time
is taken when the job has left ``pending``), so that work the server defers (compiling the
engine's kernels, learning a workload) cannot hide in the first submission. Each milestone has
its wall seconds and the server's CPU seconds at that moment (utime + stime of the process and
its waited children, /proc/PID/stat): CPU is less sensitive than wall time to what else runs on
the machine.

``cold``: an empty numba cache (``NUMBA_CACHE_DIR``) and no compiled bytecode of the build's own
source (its ``src/**/__pycache__`` removed), as after a fresh clone and ``make run``'s install
(pip compiles the dependencies' bytecode); ``warm``: the same again, as every later start. The
children run without ``PYTHONDONTWRITEBYTECODE``, as a user's shell does. Then ``xpupool agent
--fake examples/agent-fake.yaml`` joins that server: ``agent`` is the time until its node is
listed, with the agent's CPU. ``cli``: ``xpupool nodes`` against it, wall and CPU from the child's
rusage.

Every build named with ``--build NAME=CHECKOUT`` runs the same steps with ``PYTHONPATH`` set to
that checkout's ``src`` (the interpreter is this one), rounds alternating between builds, so a
comparison is made in one run; medians are printed, with ``ratio`` (each build over the first)
when there are two or more. Goals (issue 42): first answer within 2 s warm and 10 s cold, first
job placed within 3 s warm, a CLI command under 0.5 s, on an idle box. Current figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster-mixed.yaml"
FAKE = ROOT / "examples" / "agent-fake.yaml"
CLI = "import sys; from xpupool.cli import main; sys.argv[0] = 'xpupool'; main()"
TICK = os.sysconf("SC_CLK_TCK")
LIMIT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` and its waited-for children, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Clock:
    """Wall seconds since a process was spawned, and that process's CPU seconds."""

    def __init__(self, proc: subprocess.Popen[bytes], t0: float) -> None:
        self.proc, self.t0 = proc, t0

    def until(self, check: Callable[[], bool], what: str) -> dict[str, float]:
        deadline = self.t0 + LIMIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what}: the process exited with {self.proc.returncode}")
            try:
                if check():
                    wall = time.monotonic() - self.t0
                    return {"wall_s": round(wall, 3), "cpu_s": round(cpu_s(self.proc.pid), 3)}
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{what}: nothing after {LIMIT_S} s")


def spawn(env: dict[str, str], args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", CLI, *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_once(src: Path, caches: Path, work: Path) -> dict[str, Any]:
    """One start of the server, an agent and a CLI command with ``src``'s code and ``caches``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env["NUMBA_CACHE_DIR"] = str(caches / "numba")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("XPUPOOL_URL", None)
    env.pop("XPUPOOL_TOKEN", None)
    data, port = work / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    server = spawn(
        env,
        ["up", "--data", str(data), "--port", str(port), "--cluster", str(CLUSTER)],
        work / "server.log",
    )
    agent: subprocess.Popen[bytes] | None = None
    try:
        clock = Clock(server, t0)
        with httpx.Client(base_url=url, timeout=10) as c:
            out["healthz"] = clock.until(lambda: c.get("/healthz").status_code == 200, "healthz")
            token = (data / "admin-token").read_text().strip()
            admin = {"Authorization": f"Bearer {token}"}
            out["nodes"] = clock.until(
                lambda: c.get("/v1/nodes", headers=admin).status_code == 200, "/v1/nodes"
            )
            c.post("/v1/tenants", json={"name": "bench"}, headers=admin).raise_for_status()
            r = c.post("/v1/tenants/bench/tokens", json={"name": "bench"}, headers=admin)
            tenant = {"Authorization": f"Bearer {r.raise_for_status().json()['token']}"}
            body = {"request": "any", "command": ["true"]}
            job = c.post("/v1/jobs", json=body, headers=tenant).raise_for_status().json()["id"]
            out["first_job"] = clock.until(
                lambda: c.get(f"/v1/jobs/{job}", headers=tenant).json()["state"] != "pending",
                "first job placed",
            )
            token_file = work / "agent-token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            a0 = time.monotonic()
            agent = spawn(
                env,
                [
                    "agent",
                    "--server",
                    url,
                    "--token-file",
                    str(token_file),
                    "--node",
                    "bench-agent",
                    "--fake",
                    str(FAKE),
                    "--work-dir",
                    str(work / "agent"),
                ],
                work / "agent.log",
            )
            out["agent"] = Clock(agent, a0).until(
                lambda: any(
                    n["name"] == "bench-agent" for n in c.get("/v1/nodes", headers=admin).json()
                ),
                "agent registered",
            )
        cli_env = {**env, "XPUPOOL_URL": url, "XPUPOOL_TOKEN": token}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", CLI, "nodes"], env=cli_env, capture_output=True, check=False
        )
        wall = time.monotonic() - c0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"xpupool nodes: {done.stderr.decode()[-400:]}")
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out["cli"] = {"wall_s": round(wall, 3), "cpu_s": round(used, 3)}
    finally:
        if agent is not None:
            stop(agent)
        stop(server)
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {
        step: {
            unit: round(statistics.median(r[step][unit] for r in runs), 3)
            for unit in ("wall_s", "cpu_s")
        }
        for step in runs[0]
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME=CHECKOUT",
        help="a checkout to time beside this one (repeatable); default: this checkout only",
    )
    parser.add_argument("--rounds", type=int, default=3, help="cold + warm starts per build")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="only warm starts: one cold start per build fills its caches first, not counted "
        "(a quicker loop while working on the warm start)",
    )
    args = parser.parse_args()
    builds: dict[str, Path] = {"this": ROOT / "src"}
    for item in args.build:
        name, sep, path = item.partition("=")
        src = Path(path).resolve() / "src"
        if not sep or not name or not (src / "xpupool").is_dir():
            parser.error(
                f"--build: expected NAME=CHECKOUT with CHECKOUT/src/xpupool (got {item!r})"
            )
        builds[name] = src
    starts = ("warm",) if args.warm_only else ("cold", "warm")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {kind: [] for kind in starts} for name in builds
    }
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="xpupool-startup-") as tmp:
        if args.warm_only:
            for name, src in builds.items():
                prime = Path(tmp) / f"{name}-prime"
                prime.mkdir()
                run_once(src, Path(tmp) / f"{name}-caches", prime)
        for r in range(args.rounds):
            for name, src in builds.items():
                caches = Path(tmp) / (f"{name}-caches" if args.warm_only else f"{name}-{r}-caches")
                if not args.warm_only:
                    for pyc in src.rglob("__pycache__"):
                        shutil.rmtree(pyc)
                for kind in starts:
                    loads.append(loadavg())
                    work = Path(tmp) / f"{name}-{r}-{kind}"
                    work.mkdir()
                    runs[name][kind].append(run_once(src, caches, work))
    result: dict[str, Any] = {
        "rounds": args.rounds,
        "loadavg_1m": [min(loads), max(loads)],
        "builds": {
            name: {k: median_of(v) for k, v in kinds.items()} for name, kinds in runs.items()
        },
    }
    if len(builds) > 1:
        first = next(iter(builds))
        base = result["builds"][first]
        result["ratio"] = {
            name: {
                kind: {
                    step: round(got[kind][step]["cpu_s"] / max(base[kind][step]["cpu_s"], 1e-3), 2)
                    for step in got[kind]
                }
                for kind in got
            }
            for name, got in result["builds"].items()
            if name != first
        }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
