"""Run the replicas the server hands a node, and stop them for real.

The runner never starts a process itself: for each replica it builds one launch specification
(:func:`xpupool.agent.launch.build_spec`: uid, clean environment, private working directory,
limits, capped log) and hands it to the back end the agent is configured with (``host``,
``bwrap``, or ``container`` for images). Each replica's output goes to a local log file, drained
by the agent; new bytes are shipped to the server as they appear. Stopping signals the replica
(SIGTERM, SIGKILL after a grace period), and a replica is reported ``stopped`` only when nothing
of it is left: the server frees its devices on that report, so a process that outlives it would
run on devices someone else now holds.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from xpupool.agent.launch import (
    Backend,
    Launched,
    LaunchError,
    LaunchSettings,
    backend_for,
    build_spec,
    group_alive,
)
from xpupool.agent.launch.process import write_log_line
from xpupool.server.schemas import ReplicaReport, Work

log = logging.getLogger("xpupool.agent")

State = Literal["running", "succeeded", "failed", "stopped"]
FINAL: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})
NO_RUNTIME = "container images need a container runtime; none configured"

__all__ = ["FINAL", "NO_RUNTIME", "Replica", "Runner", "group_alive"]


@dataclass
class Replica:
    """One replica this node runs or ran. ``allocation_id`` tells a rerun of the same replica
    (requeued, placed here again) from the run before it. ``launched`` None: it never started
    (``reason`` says why)."""

    work: Work
    log_path: Path
    launched: Launched | None = None
    backend: Backend | None = None
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
        return self.launched.pid if self.launched is not None else None

    @property
    def limits(self) -> str:
        return self.launched.limits if self.launched is not None else ""

    def report(self) -> ReplicaReport:
        return ReplicaReport(
            job_id=self.work.job_id,
            replica=self.work.replica,
            state=self.state,
            exit_code=self.exit_code,
            reason=self.flag if self.state == "running" else self.reason,
            pid=self.pid,
            memory_used_mib=dict(self.memory_used_mib),
            limits=self.limits,
        )


class Runner:
    """The replicas of one node. Not thread-safe: one agent loop drives it. ``work_dir`` holds
    the agent's copy of each replica's log (0600); the replicas' working directories are under
    ``settings.job_root``, outside it."""

    def __init__(
        self,
        node: str,
        work_dir: Path,
        *,
        grace_s: float = 10.0,
        settings: LaunchSettings | None = None,
        node_vendors: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.work_dir = work_dir
        self.grace_s = grace_s
        self.settings = settings or LaunchSettings()
        self.node_vendors = tuple(node_vendors)
        self.clock = clock
        self.replicas: dict[tuple[int, int], Replica] = {}
        self._done_allocations: set[int] = set()  # final and acknowledged: never start again
        self._backends: dict[str, Backend] = {}
        self._lingering: list[Replica] = []  # reported and forgotten, not yet cleaned up

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = backend_for(name, self.settings)
        return self._backends[name]

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
        logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        # a file per run: a run again after a restart never re-sends an earlier run's output
        path = logs / f"{work.job_id}-{work.replica}-{alloc}-{work.attempt}.log"
        rep = Replica(work, path)
        self.replicas[rep.key] = rep
        try:
            spec = build_spec(work, path, self.settings, self.node_vendors)
            rep.backend = self.backend(self.settings.backend_name(work.image))
            rep.launched = rep.backend.start(spec)
        except LaunchError as exc:
            return self._refuse(rep, exc.reason)
        log.info(
            "job %d replica %d on %s: started pid %d (%s, %s)",
            work.job_id,
            work.replica,
            self.node,
            rep.pid,
            rep.backend.name,
            rep.limits,
        )
        return rep

    def _refuse(self, rep: Replica, reason: str) -> Replica:
        write_log_line(rep.log_path, reason)
        rep.state, rep.exit_code, rep.reason = "failed", None, reason
        rep.leader_done = True
        log.warning("job %d replica %d: %s", rep.work.job_id, rep.work.replica, reason)
        return rep

    def stop(self, job_id: int, replica: int) -> None:
        """SIGTERM the replica now, SIGKILL after the grace period (see :meth:`poll`). A replica
        this node does not know is reported stopped at once (nothing of it runs)."""
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
        if rep.launched is not None and rep.backend is not None:
            log.info("job %d replica %d: SIGTERM to group %d", job_id, replica, rep.launched.pgid)
            rep.backend.signal(rep.launched, signal.SIGTERM)

    # ------------------------------------------------------------------ watching
    def poll(self) -> None:
        """Reap exits, escalate overdue stops to SIGKILL, and settle each replica's state."""
        now = self.clock()
        self._lingering = [r for r in self._lingering if not _clean(r)]
        for rep in self.replicas.values():
            launched, backend = rep.launched, rep.backend
            if launched is None or backend is None:
                continue
            if rep.state in FINAL:
                _clean(rep)  # a cgroup that was still busy last time
                continue
            if not rep.leader_done and launched.proc.poll() is not None:
                rep.leader_done = True
                self._settle_exit(rep, launched, backend)
                if not rep.stop_requested:
                    backend.signal(launched, signal.SIGKILL)  # what the replica left behind
            if rep.stop_requested and rep.kill_at is not None and now >= rep.kill_at:
                if backend.alive(launched):
                    log.warning("job %d replica %d: SIGKILL to group %d", *rep.key, launched.pgid)
                    backend.signal(launched, signal.SIGKILL)
                rep.kill_at = now + max(self.grace_s, 0.1)  # again later if something survives
            if rep.leader_done and not backend.alive(launched):
                if rep.stop_requested:
                    rep.state = "stopped"
                    rep.reason = f"stopped ({rep.reason})"
                else:
                    rep.state = "succeeded" if rep.exit_code == 0 else "failed"
                backend.cleanup(launched)

    @staticmethod
    def _settle_exit(rep: Replica, launched: Launched, backend: Backend) -> None:
        code = launched.proc.returncode
        rep.exit_code = 128 - code if code < 0 else code
        rep.reason = (
            f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
        )
        if backend.oom_killed(launched):
            rep.reason += f": out of memory (over its memory={launched.spec.memory_mib}Mi limit)"

    def reports(self) -> list[ReplicaReport]:
        return [rep.report() for rep in self.replicas.values()]

    @property
    def idle(self) -> bool:
        """Nothing to watch, report or clean up: no replica, none lingering."""
        return not self.replicas and not self._lingering

    def acknowledge(self, sent: Iterable[ReplicaReport]) -> None:
        """The server has these reports: forget the replicas whose report was final."""
        for r in sent:
            rep = self.replicas.get((r.job_id, r.replica))
            if rep is not None and r.state in FINAL and rep.state == r.state:
                self._done_allocations.add(rep.work.assignment.allocation_id)
                del self.replicas[rep.key]
                if rep.launched is not None and not rep.launched.cleaned:
                    self._lingering.append(rep)  # its cgroup was still busy: retried by poll

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
            rep.key: rep.launched.pgid
            for rep in self.replicas.values()
            if rep.launched is not None and rep.state not in FINAL
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
                break
            time.sleep(0.05)
        if self.settings.cgroups is not None:
            self.settings.cgroups.release()  # fails, harmlessly, while another runner uses it


def _clean(rep: Replica) -> bool:
    """Clean up after a replica that is over, if not done yet; True once it is."""
    if rep.launched is None or rep.backend is None:
        return True
    if not rep.launched.cleaned:
        rep.backend.cleanup(rep.launched)
    return rep.launched.cleaned


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
