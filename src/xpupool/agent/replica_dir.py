"""The files through which an agent and a replica's supervisor speak: one directory per run.

``<agent work dir>/replicas/<job>.<replica>.<attempt>/`` holds what the agent hands the supervisor
(``work.json``: the server's work item; ``spec.json``: the launch specification and the agent's
launch settings), what the supervisor says back (``status.json``: its own pid and start time, the
replica's pid, the attempt, the state, the exit code, the stop cause), the replica's log
(``output.log``; ``shipped``: how much of it the server has; ``container.id``: an image replica's
container id, which the runtime writes, for the share watch), and the agent's instructions:
``lease`` (the time, on CLOCK_MONOTONIC, until which the replica may run; the agent moves it
forward after each heartbeat the server answered), ``stop`` (stop now; the grace period in
seconds inside) and ``collected`` (the server has the result: the supervisor may remove the
directory and exit). Every file is written whole to a
temporary name and renamed, so a reader sees the old content or the new one, never a part.

Times are ``time.monotonic()`` seconds: CLOCK_MONOTONIC is one clock for every process of a Linux
host (it does not jump with the wall clock), and a lease never needs to outlive a reboot, which
ends the supervisor too.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

from xpupool.server.schemas.agent_protocol import FINAL_REPLICA_STATES

SupervisorState = Literal["starting", "running", "succeeded", "failed", "stopped"]
"""What ``status.json`` says: ``starting``, or a replica state (``ReplicaState``'s words)."""
StopKind = Literal["", "requested", "lease_expired", "signalled", "start_failed"]
REPLICAS = "replicas"
CONTAINER_ID = "container.id"


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """One run's directory; ``name`` is ``<job>.<replica>.<attempt>``."""

    path: Path

    @classmethod
    def under(cls, work_dir: Path, job_id: int, replica: int, attempt: int) -> ReplicaDir:
        return cls(work_dir / REPLICAS / f"{job_id}.{replica}.{attempt}")

    @property
    def work(self) -> Path:
        return self.path / "work.json"

    @property
    def spec(self) -> Path:
        return self.path / "spec.json"

    @property
    def status(self) -> Path:
        return self.path / "status.json"

    @property
    def lease(self) -> Path:
        return self.path / "lease"

    @property
    def stop(self) -> Path:
        return self.path / "stop"

    @property
    def checkpoint_signal(self) -> Path:
        return self.path / "checkpoint_signal"

    @property
    def resize_signal(self) -> Path:
        return self.path / "resize_signal"

    @property
    def collected(self) -> Path:
        return self.path / "collected"

    @property
    def log(self) -> Path:
        return self.path / "output.log"

    @property
    def container_id(self) -> Path:
        """The runtime's ``--cidfile``: the container id its cgroup path carries."""
        return self.path / CONTAINER_ID

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def shipped(self) -> Path:
        """How many bytes of ``output.log`` the server took (the agent's; a restart resumes
        there, and a chunk sent again past it is skipped by the server anyway)."""
        return self.path / "shipped"


@dataclass(frozen=True, slots=True)
class SupervisorStatus:
    """What ``status.json`` says. ``supervisor_started``: its start time in clock ticks since
    boot (field 22 of /proc/PID/stat), which tells that supervisor from a later process that got
    its pid. ``replica_pid``: the replica's process group leader (0 before it started).
    ``leader_done``: the leader exited, the rest of the group may still be going. ``stop_kind``:
    why it was stopped ("" when it ended on its own). ``step``: what a start with a long step
    before the replica runs is doing (an image's pull), for the job's events."""

    supervisor_pid: int
    supervisor_started: int
    attempt: int
    state: SupervisorState = "starting"
    replica_pid: int = 0
    exit_code: int | None = None
    reason: str = ""
    stop_kind: StopKind = ""
    limits: str = ""
    leader_done: bool = False
    step: str = ""

    @property
    def final(self) -> bool:
        return self.state in FINAL_REPLICA_STATES


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path``: written to a temporary name (0600), then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_status(d: ReplicaDir, status: SupervisorStatus) -> None:
    write_atomic(d.status, json.dumps(asdict(status)).encode())


def read_status(d: ReplicaDir) -> SupervisorStatus | None:
    """The status, or None when there is none (yet) or it cannot be read."""
    try:
        raw = json.loads(d.status.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    known = {f.name for f in fields(SupervisorStatus)}
    try:
        return SupervisorStatus(**{k: v for k, v in raw.items() if k in known})
    except TypeError:
        return None


def write_lease(d: ReplicaDir, until_monotonic: float) -> None:
    write_atomic(d.lease, f"{until_monotonic:.6f}\n".encode())


def read_lease(d: ReplicaDir) -> float:
    """The lease's end (monotonic seconds); a missing or unreadable lease has ended (-inf)."""
    try:
        return float(d.lease.read_text())
    except (OSError, ValueError):
        return float("-inf")


def read_shipped(d: ReplicaDir) -> int:
    try:
        return max(int(d.shipped.read_text()), 0)
    except (OSError, ValueError):
        return 0


def request_stop(d: ReplicaDir, grace_s: float, checkpoint_signal: str | None = None) -> None:
    """Ask the supervisor to stop the replica: ``checkpoint_signal`` first when given (its own
    file, written before ``stop``, which an older supervisor does not read), then SIGTERM, then
    SIGKILL ``grace_s`` later (model/stopping.py says the order)."""
    if checkpoint_signal is not None:
        write_atomic(d.checkpoint_signal, f"{checkpoint_signal}\n".encode())
    write_atomic(d.stop, f"{grace_s:g}\n".encode())


def checkpoint_signal_asked(d: ReplicaDir) -> str | None:
    """The checkpoint signal a stop asked for, or None (none, or unreadable)."""
    try:
        name = d.checkpoint_signal.read_text().strip()
    except OSError:
        return None
    return name if name.isalnum() and name.isupper() else None


def request_resize_signal(d: ReplicaDir, name: str) -> None:
    """Ask the supervisor to send the replica signal ``name`` (``USR1``) once: an elastic job's
    size file changed (agent/elastic_size.py). Each request carries a new CLOCK_MONOTONIC stamp,
    which the supervisor compares with the last it carried out."""
    write_atomic(d.resize_signal, f"{time.monotonic_ns()} {name}\n".encode())


def resize_signal_asked(d: ReplicaDir) -> tuple[int, str] | None:
    """(stamp, signal name) of the last resize signal asked for, or None (none, or unreadable)."""
    try:
        stamp, name = d.resize_signal.read_text().split()
    except (OSError, ValueError):
        return None
    if not (stamp.isdigit() and name.isalnum() and name.isupper()):
        return None
    return int(stamp), name


def stop_requested(d: ReplicaDir) -> float | None:
    """The grace period of a stop the agent asked for, or None when it asked for none."""
    try:
        text = d.stop.read_text()
    except OSError:
        return None
    try:
        return max(float(text), 0.0)
    except ValueError:
        return 0.0


def process_started(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot; None when there is no such
    process (or it is a zombie: what is left of it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    after = stat[stat.rfind(")") + 2 :].split()
    if not after or after[0] in ("Z", "X"):
        return None
    return int(after[19])  # field 22 of stat, counted after the command's closing parenthesis


def is_supervisor(d: ReplicaDir, status: SupervisorStatus) -> bool:
    """True when ``status.supervisor_pid`` is still that run's supervisor: the same start time
    and this directory in its command line. A pid reused by any other process fails both."""
    if process_started(status.supervisor_pid) != status.supervisor_started:
        return False
    try:
        cmdline = Path(f"/proc/{status.supervisor_pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(d.path).encode() in cmdline.split(b"\0")


def replica_dirs(work_dir: Path) -> list[ReplicaDir]:
    """Every run directory under ``work_dir``, oldest attempt first per replica."""
    root = work_dir / REPLICAS
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        parts = entry.name.split(".")
        if entry.is_dir() and len(parts) == 3 and all(p.isdigit() for p in parts):
            found.append((tuple(int(p) for p in parts), ReplicaDir(entry)))
    return [d for _, d in sorted(found, key=lambda item: item[0])]


def remove(d: ReplicaDir) -> None:
    """The directory and what is in it (no deeper tree is ever written there)."""
    with contextlib.suppress(FileNotFoundError):
        for entry in d.path.iterdir():
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
        d.path.rmdir()
