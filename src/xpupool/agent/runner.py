"""Run the replicas the server hands a node as real processes, and stop them for real.

Each replica is one process group (``start_new_session``) whose output (stdout and stderr, merged)
goes to a local log file; new bytes are shipped to the server as they appear. Stopping sends
SIGTERM to the group and SIGKILL after a grace period, and a replica is reported ``stopped`` only
when no process of its group is left: the server frees its devices on that report, so a process
that outlives it would run on devices someone else now holds. For the same reason, on Linux every
replica is started through a tiny launcher that asks the kernel to SIGKILL it when the agent dies
(``PR_SET_PDEATHSIG``, kept across ``exec``): a node that is marked lost and whose jobs are
requeued leaves no process behind to run the same job twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from xpupool.agent.env import replica_env
from xpupool.server.schemas import ReplicaReport, Work

log = logging.getLogger("xpupool.agent")

State = Literal["running", "succeeded", "failed", "stopped"]
FINAL: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})
NO_RUNTIME = "container images need a container runtime; none configured"

# Run before exec in the child: die with the agent (Linux), then become the job's command.
# Exit 127 with the reason in the log when the command cannot be run (the shell's convention).
_LAUNCH = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(137)  # the agent died before the request took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"xpupool: cannot run {sys.argv[2]!r}: {exc}\\n")
    os._exit(127)
"""


def launch_argv(command: list[str]) -> list[str]:
    """``command`` behind the launcher on Linux (``-I -S``: no site, no user paths: a fast start
    that the job's PYTHON* variables cannot change); unchanged elsewhere."""
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, "-I", "-S", "-c", _LAUNCH, str(os.getpid()), *command]


def group_alive(pgid: int) -> bool:
    """True while a live (not zombie) process is in group ``pgid``. Linux reads /proc so that an
    unreaped zombie does not hold a replica open; elsewhere ``killpg(pgid, 0)``."""
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass
class Replica:
    """One replica this node runs or ran. ``allocation_id`` tells a rerun of the same replica
    (requeued, placed here again) from the run before it."""

    work: Work
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    state: State = "running"
    exit_code: int | None = None
    reason: str = ""
    shipped: int = 0
    stop_requested: bool = False
    kill_at: float | None = None
    leader_done: bool = False
    memory_used_mib: dict[str, int] = field(default_factory=dict)  # per UUID, last measured
    memory_measured: bool = False  # False: no probe could list its processes' memory this pass
    flag: str = ""  # a problem to report while running (over its device memory)

    @property
    def key(self) -> tuple[int, int]:
        return (self.work.job_id, self.work.replica)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def report(self) -> ReplicaReport:
        return ReplicaReport(
            job_id=self.work.job_id,
            replica=self.work.replica,
            state=self.state,
            exit_code=self.exit_code,
            reason=self.flag if self.state == "running" else self.reason,
            pid=self.pid,
            memory_used_mib=dict(self.memory_used_mib),
        )


class Runner:
    """The replicas of one node. Not thread-safe: one agent loop drives it."""

    def __init__(
        self,
        node: str,
        work_dir: Path,
        *,
        grace_s: float = 10.0,
        base_env: Mapping[str, str] | None = None,
        node_vendors: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.work_dir = work_dir
        self.grace_s = grace_s
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.node_vendors = tuple(node_vendors)
        self.clock = clock
        self.replicas: dict[tuple[int, int], Replica] = {}
        self._done_allocations: set[int] = set()  # final and acknowledged: never start again

    # ------------------------------------------------------------------ acting on the reply
    def start(self, work: Work) -> Replica | None:
        """Start ``work`` unless it already runs (or ran) here; None when nothing was started."""
        current = self.replicas.get((work.job_id, work.replica))
        alloc = work.assignment.allocation_id
        if alloc in self._done_allocations:
            return None
        if current is not None and (
            current.work.assignment.allocation_id == alloc or current.state not in FINAL
        ):
            return None
        logs = self.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{work.job_id}-{work.replica}-{alloc}.log"
        rep = Replica(work, path)
        self.replicas[rep.key] = rep
        with path.open("ab") as out:
            if work.image:
                return self._refuse(rep, out, NO_RUNTIME)
            if not work.command:
                return self._refuse(rep, out, "no command to run (and no image)")
            env = replica_env(work, self.base_env, self.node_vendors)
            cwd = self.work_dir / "run" / f"{work.job_id}-{work.replica}"
            cwd.mkdir(parents=True, exist_ok=True)
            try:
                rep.proc = subprocess.Popen(
                    launch_argv(work.command),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                return self._refuse(rep, out, f"cannot start {work.command[0]!r}: {exc}")
        log.info(
            "job %d replica %d on %s: started pid %d", work.job_id, work.replica, self.node, rep.pid
        )
        return rep

    def _refuse(self, rep: Replica, out: IO[bytes], reason: str) -> Replica:
        out.write(f"xpupool: {reason}\n".encode())
        rep.state, rep.exit_code, rep.reason = "failed", None, reason
        log.warning("job %d replica %d: %s", rep.work.job_id, rep.work.replica, reason)
        return rep

    def stop(self, job_id: int, replica: int) -> None:
        """SIGTERM the replica's group now, SIGKILL after the grace period (see :meth:`poll`).
        A replica this node does not know is reported stopped at once (nothing of it runs)."""
        rep = self.replicas.get((job_id, replica))
        if rep is None:
            rep = Replica(_placeholder(job_id, replica, self.node), Path(os.devnull))
            rep.state, rep.reason, rep.leader_done = "stopped", "not running on this node", True
            self.replicas[rep.key] = rep
            return
        if rep.stop_requested or rep.state in FINAL:
            return
        rep.stop_requested = True
        rep.kill_at = self.clock() + self.grace_s
        if rep.proc is not None:
            log.info("job %d replica %d: SIGTERM to group %d", job_id, replica, rep.proc.pid)
            _signal_group(rep.proc.pid, signal.SIGTERM)

    # ------------------------------------------------------------------ watching
    def poll(self) -> None:
        """Reap exits, escalate overdue stops to SIGKILL, and settle each replica's state."""
        now = self.clock()
        for rep in self.replicas.values():
            if rep.state in FINAL or rep.proc is None:
                continue
            pgid = rep.proc.pid
            if not rep.leader_done and rep.proc.poll() is not None:
                rep.leader_done = True
                code = rep.proc.returncode
                rep.exit_code = 128 - code if code < 0 else code
                if code < 0:
                    rep.reason = f"killed by {signal.Signals(-code).name}"
                else:
                    rep.reason = f"exited with {code}"
                if not rep.stop_requested:
                    _signal_group(pgid, signal.SIGKILL)  # what the replica left behind
            if rep.stop_requested and rep.kill_at is not None and now >= rep.kill_at:
                if group_alive(pgid):
                    log.warning("job %d replica %d: SIGKILL to group %d", *rep.key, pgid)
                    _signal_group(pgid, signal.SIGKILL)
                rep.kill_at = now + max(self.grace_s, 0.1)  # again later if something survives
            if rep.leader_done and not group_alive(pgid):
                if rep.stop_requested:
                    rep.state = "stopped"
                    rep.reason = f"stopped ({rep.reason})"
                else:
                    rep.state = "succeeded" if rep.exit_code == 0 else "failed"

    def reports(self) -> list[ReplicaReport]:
        return [rep.report() for rep in self.replicas.values()]

    def acknowledge(self, sent: Iterable[ReplicaReport]) -> None:
        """The server has these reports: forget the replicas whose report was final."""
        for r in sent:
            rep = self.replicas.get((r.job_id, r.replica))
            if rep is not None and r.state in FINAL and rep.state == r.state:
                self._done_allocations.add(rep.work.assignment.allocation_id)
                del self.replicas[rep.key]

    def ship_logs(self, send: Callable[[int, int, bytes], None], max_chunk: int = 1 << 20) -> None:
        """Send each replica's new output with ``send(job_id, replica, chunk)``; a failed send is
        retried on the next call (the offset only moves on success)."""
        for rep in self.replicas.values():
            if rep.log_path == Path(os.devnull):
                continue
            try:
                size = rep.log_path.stat().st_size
            except OSError:
                continue
            while rep.shipped < size:
                with rep.log_path.open("rb") as f:
                    f.seek(rep.shipped)
                    chunk = f.read(min(max_chunk, size - rep.shipped))
                if not chunk:
                    break
                send(rep.work.job_id, rep.work.replica, chunk)
                rep.shipped += len(chunk)

    def running_groups(self) -> dict[tuple[int, int], int]:
        """Process group of every replica that still has processes: ``{(job, replica): pgid}``."""
        return {
            rep.key: rep.proc.pid
            for rep in self.replicas.values()
            if rep.proc is not None and rep.state not in FINAL
        }

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop every replica and wait for their groups to go (up to ``timeout_s``, default the
        grace period plus a second); used when the agent itself stops."""
        for key in list(self.replicas):
            self.stop(*key)
        deadline = self.clock() + (self.grace_s + 1.0 if timeout_s is None else timeout_s)
        while self.clock() < deadline:
            self.poll()
            if all(rep.state in FINAL for rep in self.replicas.values()):
                return
            time.sleep(0.05)


def _placeholder(job_id: int, replica: int, node: str) -> Work:
    from xpupool.server.schemas import ReplicaAssignment

    return Work(
        job_id=job_id,
        replica=replica,
        name="",
        command=[],
        image=None,
        env={},
        assignment=ReplicaAssignment(
            replica=replica, allocation_id=-1, node=node, cpu_milli=0, memory_mib=0, devices=[]
        ),
    )
