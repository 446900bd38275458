"""A fake ``nvidia-cuda-mps-control`` for the MPS tests: records each call's argv and
environment (one JSON line each in ``calls.jsonl``), stays alive in the background with ``-d``
(its pid in ``<pipe>/fake.pid``), and as a client answers ``get_server_list`` (0 while that
daemon lives) and ``quit`` (the daemon exits) on stdin, as the real one does."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

_SCRIPT = """#!{python}
import json, os, signal, sys, time
record = {record!r}
with open(record, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid()}}) + "\\n")
pidfile = os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "fake.pid")

def daemon_pid():
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None

if sys.argv[1:] == ["-d"]:
    if os.fork():
        sys.exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.1)
command = sys.stdin.read().strip()
pid = daemon_pid()
if pid is None:
    print("Cannot find MPS control daemon process", file=sys.stderr)
    sys.exit(1)
if command == "quit":
    os.kill(pid, signal.SIGTERM)
    os.unlink(pidfile)
sys.exit(0)
"""


def install(where: Path) -> Path:
    """The fake in ``where/bin``; returns that directory (put it first on PATH)."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(_SCRIPT.format(python=sys.executable, record=str(where / "calls.jsonl")))
    script.chmod(0o755)
    return bin_dir


def calls(where: Path) -> list[dict[str, object]]:
    path = where / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def live_daemons(root: Path) -> list[int]:
    """Pids of the fake daemons alive under ``root``."""
    out = []
    for pidfile in root.glob("*/pipe/fake.pid"):
        try:
            pid = int(pidfile.read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if state != "Z":
            out.append(pid)
    return out


def kill_all(root: Path) -> None:
    for pid in live_daemons(root):
        os.kill(pid, signal.SIGKILL)
