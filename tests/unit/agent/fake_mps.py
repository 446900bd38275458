"""A fake ``nvidia-cuda-mps-control`` for the MPS tests: records each call's argv, environment
and stdin (one JSON line each in ``calls.jsonl``), stays alive in the background with ``-d``
(its pid in ``<pipe>/fake.pid``), and as a client answers ``get_server_list`` (0 while that
daemon lives), ``quit`` (the daemon exits) and the two ``set_default_*`` cap commands (kept in
``<pipe>/fake.caps.json`` while it lives) on stdin, as the real one does.

:func:`client_caps` is what a client of that daemon is held to, by the rule NVIDIA documents
(MPS documentation, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" and the man page of
``nvidia-cuda-mps-control``): the client's own variables can only lower the daemon's caps."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

_SCRIPT = """#!{python}
import json, os, signal, sys, time
record = {record!r}
command = "" if sys.argv[1:] == ["-d"] else sys.stdin.read().strip()
with open(record, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid(),
                         "input": command}}) + "\\n")
pidfile = os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "fake.pid")
capsfile = os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "fake.caps.json")

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
pid = daemon_pid()
if pid is None:
    print("Cannot find MPS control daemon process", file=sys.stderr)
    sys.exit(1)
words = command.split()
if command == "quit":
    os.kill(pid, signal.SIGTERM)
    os.unlink(pidfile)
    if os.path.exists(capsfile):
        os.unlink(capsfile)  # the set values are lost with the daemon, as the real one's
elif words[:1] in (["set_default_device_pinned_mem_limit"], ["set_default_active_thread_percentage"]):
    caps = json.load(open(capsfile)) if os.path.exists(capsfile) else {{}}
    if words[0] == "set_default_device_pinned_mem_limit" and len(words) == 3:
        caps["memory"] = words[1] + "=" + words[2]
    elif len(words) == 2:
        caps["threads"] = words[1]
    else:
        print("Invalid command", file=sys.stderr)
        sys.exit(1)
    with open(capsfile, "w") as f:
        json.dump(caps, f)
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


def _mib(value: str) -> int:
    """``20480M`` or ``20G`` (the control daemon's form) in MiB."""
    return int(value[:-1]) * (1024 if value.endswith("G") else 1)


def client_caps(env: dict[str, str]) -> tuple[int | None, int | None]:
    """(device 0's pinned memory cap MiB, active thread %) a client with ``env`` is held to by
    the daemon on its pipe directory: the lower of the daemon's and its own; None: no cap."""
    held = Path(env["CUDA_MPS_PIPE_DIRECTORY"]) / "fake.caps.json"
    daemon = json.loads(held.read_text()) if held.exists() else {}
    memory = [_mib(daemon["memory"][2:])] if daemon.get("memory", "").startswith("0=") else []
    own = env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
    memory += [_mib(v[2:]) for v in own.split(",") if v.startswith("0=")]
    threads = [int(daemon["threads"])] if "threads" in daemon else []
    if env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        threads.append(int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]))
    return (min(memory) if memory else None), (min(threads) if threads else None)


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
