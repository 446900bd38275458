"""Run the replicas the server hands a node, each under its own supervisor, and stop them for real.

The runner never starts a job's process itself: for each replica it builds one launch
specification (:func:`xpupool.agent.launch.build_spec`: uid, clean environment, private working
directory, limits, capped log), writes it to the run's directory
(:mod:`xpupool.agent.replica_dir`) and starts a supervisor (:mod:`xpupool.agent.supervisor`),
which starts the replica through the back end the agent is configured with (``host``, ``bwrap``,
or ``container`` for images) and outlives the agent. The runner reads what each supervisor writes
(its status; the replica's log, shipped to the server as it grows, each chunk with its offset),
moves their leases forward after each heartbeat the server answered (:meth:`Runner.renew`), and
asks them to stop. A replica
is reported ``stopped`` only when its supervisor says nothing of it is left: the server frees its
devices on that report. An agent that starts again finds the supervisors of its running replicas
(:meth:`Runner.reattach`) and reports them with their attempt, so the server adopts them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from xpupool.agent import elastic_size
from xpupool.agent import replica_dir as rd
from xpupool.agent.launch import (
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    build_spec,
    group_alive,
    secret_files,
    spec_file,
    volume_mounts,
)
from xpupool.agent.launch.mps import MpsDaemons, mps_root
from xpupool.agent.launch.process import write_log_line
from xpupool.log_rotation import read_kept
from xpupool.model.progress import PROGRESS_FILE_MAX_BYTES, PROGRESS_FILE_NAME, parse_progress
from xpupool.model.stopping import CHECKPOINT_FILE_NAME
from xpupool.server.schemas.agent_protocol import (
    FINAL_REPLICA_STATES,
    MAX_STARTING_REPORTS,
    MAX_STEP_CHARS,
    ElasticWorld,
    ReplicaReport,
    ReplicaState,
    StartingReport,
    Work,
)

log = logging.getLogger("xpupool.agent")
# every runner of this process: the nodes of one agent process (``xpupool up`` hosts several)
# share the host's ports, so a port one holds is held for all (Runner.held_ports)
_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()

NO_RUNTIME = "container images need a container runtime; none configured"
# A lease for replicas started before any server said how long one lasts (a runner driven
# without an agent, or a server that sends no lease_s): the default time before a node is lost.
DEFAULT_LEASE_S = 30.0
SUPERVISOR: tuple[str, ...] = (sys.executable, "-m", "xpupool.agent.supervisor")
"""The command that starts a replica's supervisor; its run's directory and attempt follow."""

__all__ = ["NO_RUNTIME", "Replica", "Runner", "group_alive"]

LogSend = Callable[[int, int, bytes, int, int], None]
"""``send(job_id, replica, chunk, offset, attempt)``: ``offset`` is where ``chunk`` starts in
that attempt's output, so a receiver keeps each byte once however often it is sent."""


@dataclass
class Replica:
    """One replica this node runs or ran. ``allocation_id`` tells a rerun of the same replica
    (requeued, placed here again) from the run before it. ``run_dir`` None: never handed to a
    supervisor (``reason`` says why); ``supervisor`` is the process when this agent started it
    (one found after a restart is watched through its status and /proc)."""

    work: Work
    log_path: Path
    run_dir: rd.ReplicaDir | None = None
    spec: LaunchSpec | None = None
    status: rd.SupervisorStatus | None = None
    supervisor: subprocess.Popen[bytes] | None = None
    state: ReplicaState = ReplicaState.RUNNING
    exit_code: int | None = None
    reason: str = ""
    stop_kind: str = ""
    shipped: int = 0
    stop_requested: bool = False
    memory_used_mib: dict[str, int] = field(default_factory=dict)  # per UUID, last measured
    memory_measured: bool = False  # False: no probe could list its processes' memory this pass
    flag: str = ""  # a problem to report while running (over its device memory)
    # why the agent itself stopped it (over its share: agent/share_watch.py): it then ends as a
    # failure with that reason, not as a stop the server asked for
    stopped_for: str = ""
    # (mtime_ns, size) of its progress file when last read: a figure is sent once, when new
    progress_seen: tuple[int, int] | None = None
    # an elastic job's size as the replica was last told it (None: its start's, in its env)
    # and whether its size file was written (agent/elastic_size.py)
    world: ElasticWorld | None = None
    world_written: bool = False

    @property
    def key(self) -> tuple[int, int]:
        return (self.work.job_id, self.work.replica)

    @property
    def pid(self) -> int | None:
        return self.status.replica_pid or None if self.status is not None else None

    @property
    def limits(self) -> str:
        return self.status.limits if self.status is not None else ""

    @property
    def starting(self) -> bool:
        """Its supervisor has not started it yet: not reported (the server records the pid of
        the first report)."""
        return self.state is ReplicaState.RUNNING and (
            self.status is None or self.status.state == "starting"
        )

    @property
    def leader_done(self) -> bool:
        return self.status is None or self.status.leader_done

    def report(self) -> ReplicaReport:
        return ReplicaReport(
            job_id=self.work.job_id,
            replica=self.work.replica,
            state=self.state,
            exit_code=self.exit_code,
            reason=self.flag if self.state is ReplicaState.RUNNING else self.reason,
            pid=self.pid,
            memory_used_mib=dict(self.memory_used_mib),
            limits=self.limits,
            attempt=self.work.attempt if self.run_dir is not None else None,
            stop_cause="lease_expired" if self.stop_kind == "lease_expired" else "",
            ports=list(self.spec.ports) if self.spec is not None else [],
            checkpoint_age_s=self.checkpoint_age_s(),
            progress_rate=self.progress_rate(),
        )

    def checkpoint_age_s(self) -> float | None:
        """Seconds since a running replica last wrote its checkpoint file (its working
        directory is its run's own, so the file is this run's); None: none written."""
        if self.state is not ReplicaState.RUNNING or self.spec is None:
            return None
        try:
            written = (self.spec.workdir / CHECKPOINT_FILE_NAME).stat().st_mtime
        except OSError:
            return None
        return max(0.0, time.time() - written)

    def progress_rate(self) -> float | None:
        """The rate a running replica wrote to its progress file since it was last read
        (``model/progress.py``): the first :data:`PROGRESS_FILE_MAX_BYTES` bytes, parsed and
        bounded; None when the file is absent, unchanged, or holds no valid rate. The file is in
        the run's own working directory, and is opened without following a link, so a job
        points the agent at no other file."""
        if self.state is not ReplicaState.RUNNING or self.spec is None:
            return None
        path = self.spec.workdir / PROGRESS_FILE_NAME
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            seen = (st.st_mtime_ns, st.st_size)
            if seen == self.progress_seen or not stat.S_ISREG(st.st_mode):
                return None
            self.progress_seen = seen
            data = os.read(fd, PROGRESS_FILE_MAX_BYTES)
        except OSError:
            return None
        finally:
            os.close(fd)
        return parse_progress(data.decode("utf-8", "replace"))


class Runner:
    """The replicas of one node. Not thread-safe: one agent loop drives it. ``work_dir`` holds
    one directory per run (``replicas/``: the log, 0600, and the files the supervisor reads and
    writes); the replicas' working directories are under ``settings.job_root``, outside it.
    ``work_dir`` is made absolute here, once: each supervisor is handed its run's directory and
    works in ``/`` (a relative one failed every job, issue 42). Constructing a runner re-attaches
    to the supervisors a previous agent left there. ``supervisor``: the command that starts a
    supervisor (:data:`SUPERVISOR`; another only in tests, one that fails in a known way)."""

    def __init__(
        self,
        node: str,
        work_dir: Path,
        *,
        grace_s: float = 10.0,
        settings: LaunchSettings | None = None,
        node_vendors: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        supervisor: Sequence[str] = SUPERVISOR,
    ) -> None:
        self.node = node
        self.supervisor = tuple(supervisor)
        self.work_dir = work_dir.absolute()
        self.grace_s = grace_s
        self.settings = settings or LaunchSettings()
        self.node_vendors = tuple(node_vendors)
        self.clock = clock
        self.replicas: dict[tuple[int, int], Replica] = {}
        # allocation id -> the final report the server acknowledged of the run that held it:
        # never started again; work handed on it again is answered (see _answer)
        self._done_allocations: dict[int, ReplicaReport] = {}
        # CLOCK_MONOTONIC seconds until which replicas may run (the supervisors' lease); moved
        # by renew() after each heartbeat the server answered
        self.lease_until = time.monotonic() + DEFAULT_LEASE_S
        self.lease_grace_s = grace_s  # SIGTERM to SIGKILL when a lease ends (the server's)
        # where its replicas' secrets are written (secret_files.py: a memory filesystem)
        self.secrets_root = secret_files.secrets_root(self.work_dir, node, self.settings.job_root)
        # (volume, its tenant for a per-tenant one) -> the directory its replicas were given,
        # measured now and then for the server (volume_usage.py)
        self.volume_dirs: dict[tuple[str, str | None], str] = {}
        # one MPS daemon per (card, tenant uid, caps) of its shares, with --mps (launch/mps.py)
        self.mps = (
            MpsDaemons(mps_root(self.settings.job_root), self.settings.base_path)
            if self.settings.mps
            else None
        )
        _RUNNERS.add(self)
        self.reattach()

    # ------------------------------------------------------------------ leases
    def renew(self, until: float, grace_s: float | None = None) -> None:
        """Every live replica may run until ``until`` (CLOCK_MONOTONIC seconds)."""
        self.lease_until = until
        if grace_s is not None:
            self.lease_grace_s = grace_s
        for rep in self.replicas.values():
            if rep.run_dir is not None and rep.state not in FINAL_REPLICA_STATES:
                try:
                    rd.write_lease(rep.run_dir, until)
                except OSError as exc:  # its supervisor removed the directory: it is over
                    log.info("job %d replica %d: lease not renewed: %s", *rep.key, exc)

    # ------------------------------------------------------------------ acting on the reply
    def start(self, work: Work) -> Replica | None:
        """Start ``work`` unless it already runs (or ran) here; None when nothing was started.
        A run of an earlier attempt still going here is stopped first (started next time).
        Work on an allocation whose run here is over is never started again, nor dropped in
        silence: it is answered with a report (:meth:`_answer`), so that the job does not wait
        for ever for a start that will not come."""
        current = self.replicas.get((work.job_id, work.replica))
        alloc = work.assignment.allocation_id
        done = self._done_allocations.get(alloc)
        if done is not None and not _superseded(done, work):
            if current is None:  # else its own report goes first; the work comes again
                self._answer(work, done)
            return None
        if current is not None and current.state not in FINAL_REPLICA_STATES:
            if current.run_dir is not None and current.work.attempt != work.attempt:
                self.stop(work.job_id, work.replica)
            elif work.elastic is not None:
                self._follow_size(current, work.elastic)
            return None
        if current is not None and current.work.assignment.allocation_id == alloc:
            return None
        d = rd.ReplicaDir.under(self.work_dir, work.job_id, work.replica, work.attempt)
        rd.remove(d)  # what an earlier run left under this name (collected or abandoned)
        d.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        rep = Replica(work, d.log, run_dir=d)
        self.replicas[rep.key] = rep
        backend = self.settings.backend_name(work.image)
        try:
            spec = build_spec(work, d.log, self.settings, self.node_vendors, self.held_ports())
            spec = volume_mounts.prepare(spec, work.volumes, backend)
            for g, (host, _, _) in zip(work.volumes, spec.volumes, strict=True):
                self.volume_dirs[(g.name, work.tenant if g.per_tenant else None)] = host
            spec = secret_files.place(self.secrets_root, spec, work.secrets)
            rep.spec = secret_files.place_pull_auth(self.secrets_root, spec, work.pull_secret)
            if self.mps is not None:
                rep.spec = self.mps.attach(rep.spec)
        except LaunchError as exc:
            return self._refuse(rep, exc.reason)
        except OSError as exc:
            return self._refuse(rep, f"cannot prepare its volumes or secrets: {exc}")
        try:
            handed = spec_file.SpecFile(backend, self.settings, rep.spec, self.lease_grace_s)
            rd.write_atomic(d.spec, spec_file.dumps(handed))
            # without its secrets' values: they are in the secret files only
            unsealed = {"secrets", "pull_secret"}
            rd.write_atomic(d.work, work.model_dump_json(exclude=unsealed).encode())
        except ValueError as exc:  # a lone surrogate in argv or env cannot be written or run
            return self._refuse(rep, f"cannot start {(work.command or [''])[0]!r}: {exc}")
        rd.write_lease(d, self.lease_until)
        rep.supervisor = _spawn(self.supervisor, d, work.attempt)
        log.info("job %d replica %d on %s: supervisor started (%s)", *rep.key, self.node, backend)
        return rep

    def _follow_size(self, rep: Replica, world: ElasticWorld) -> None:
        """Tell running elastic ``rep`` its job's size ``world`` (as the server re-sends it at
        each heartbeat): its size file written once it runs, rewritten when the size or the
        ranks changed, and then the world's signal sent through its supervisor (never for the
        first write, which says what its environment said, unless the size changed since)."""
        if rep.spec is None or rep.run_dir is None or rep.stop_requested:
            return
        told = rep.world if rep.world is not None else rep.work.elastic
        if rep.world_written and world == told:
            return
        if not elastic_size.write_size_file(rep.spec.workdir, world):
            return  # its working directory is not made yet: again at the next heartbeat
        rep.world, rep.world_written = world, True
        if world != told:
            log.info("job %d replica %d: size now %d", *rep.key, world.replicas)
            with contextlib.suppress(OSError):
                rd.request_resize_signal(rep.run_dir, world.signal)

    def held_ports(self) -> set[int]:
        """The host ports of the live replicas of every node this process runs (re-attached ones
        too: their specs are read back from their run directories), never handed out again
        while they run. Two agent processes on one host are given disjoint ``--ports``."""
        held: set[int] = set()
        for runner in list(_RUNNERS):
            for rep in runner.replicas.values():
                if rep.spec is not None and rep.state not in FINAL_REPLICA_STATES:
                    held.update(rep.spec.ports)
        return held

    def _answer(self, work: Work, done: ReplicaReport) -> None:
        """Report ``work`` (handed on an allocation whose run here is over, ``done`` its final
        report) without running anything. The same replica asked for again (a server that
        restarted does not know how its run ended) is told as it ended. Another replica on that
        allocation id is reported failed with the reason: the server handed the id out twice,
        and running it would take cards the server may have given to others as well."""
        alloc = work.assignment.allocation_id
        rep = Replica(work, Path(os.devnull))
        if (done.job_id, done.replica) == (work.job_id, work.replica):
            rep.state, rep.exit_code, rep.reason = done.state, done.exit_code, done.reason
            log.info("job %d replica %d: allocation %d ran here already", *rep.key, alloc)
        else:
            rep.state, rep.exit_code = ReplicaState.FAILED, None
            rep.reason = (
                f"allocation {alloc} already ran on {self.node} (job {done.job_id} replica "
                f"{done.replica}): not started"
            )
            log.warning("job %d replica %d: %s", *rep.key, rep.reason)
        self.replicas[rep.key] = rep  # no run dir: reported with no attempt, as never started

    def _refuse(self, rep: Replica, reason: str) -> Replica:
        write_log_line(rep.log_path, reason)
        rep.state, rep.exit_code, rep.reason = ReplicaState.FAILED, None, reason
        log.warning("job %d replica %d: %s", rep.work.job_id, rep.work.replica, reason)
        return rep

    def stop(self, job_id: int, replica: int) -> None:
        """Ask the replica's supervisor to stop it: SIGTERM now, SIGKILL after the grace period.
        A replica this node does not know is reported stopped at once (nothing of it runs)."""
        rep = self.replicas.get((job_id, replica))
        if rep is None:
            rep = Replica(_placeholder(job_id, replica, self.node), Path(os.devnull))
            rep.state, rep.reason = ReplicaState.STOPPED, "not running on this node"
            self.replicas[rep.key] = rep
            return
        if rep.stop_requested or rep.state in FINAL_REPLICA_STATES or rep.run_dir is None:
            return
        rep.stop_requested = True
        log.info("job %d replica %d: stop asked of its supervisor", job_id, replica)
        grace = rep.work.grace_s if rep.work.grace_s is not None else self.grace_s
        with contextlib.suppress(OSError):
            rd.request_stop(rep.run_dir, grace, rep.work.checkpoint_signal)

    # ------------------------------------------------------------------ watching
    def poll(self) -> None:
        """Read each supervisor's status and settle each replica's state."""
        for rep in self.replicas.values():
            if rep.state not in FINAL_REPLICA_STATES:
                self._read(rep)

    def _read(self, rep: Replica) -> None:
        if rep.run_dir is None:
            return
        status = rd.read_status(rep.run_dir)
        if status is not None:
            if rep.starting and status.state == "running":
                log.info(
                    "job %d replica %d on %s: started pid %d (%s)",
                    *rep.key,
                    self.node,
                    status.replica_pid,
                    status.limits,
                )
            rep.status = status
        sup_gone = (
            rep.supervisor.poll() is not None
            if rep.supervisor is not None
            else status is None or not rd.is_supervisor(rep.run_dir, status)
        )
        if status is not None and status.final:
            rep.state = ReplicaState(status.state)  # a final SupervisorState: one of the replica's
            rep.exit_code, rep.reason, rep.stop_kind = (
                status.exit_code,
                status.reason,
                status.stop_kind,
            )
            if rep.stopped_for and rep.state is not ReplicaState.SUCCEEDED:
                rep.state = ReplicaState.FAILED
                rep.reason = (
                    f"{rep.stopped_for} ({status.reason})" if status.reason else rep.stopped_for
                )
        elif sup_gone:
            status = rd.read_status(rep.run_dir)  # it may have written its last status just now
            if status is not None and status.final:
                self._read(rep)
                return
            # the replica dies with its supervisor (PR_SET_PDEATHSIG)
            rep.state, rep.reason = ReplicaState.FAILED, _supervisor_ended(rep)
            rep.exit_code = None

    def reports(self) -> list[ReplicaReport]:
        return [rep.report() for rep in self.replicas.values() if not rep.starting]

    def starting_reports(self) -> list[StartingReport]:
        """The replicas still being started with the step their supervisor is at (an image's
        pull), every heartbeat while it lasts: the server records a step once, when it changes."""
        return [
            StartingReport(
                job_id=rep.work.job_id,
                replica=rep.work.replica,
                attempt=rep.work.attempt,
                step=rep.status.step[:MAX_STEP_CHARS],
            )
            for rep in self.replicas.values()
            if rep.starting and rep.status is not None and rep.status.step
        ][:MAX_STARTING_REPORTS]

    @property
    def idle(self) -> bool:
        """Nothing to watch or report: no replica (a finished one's supervisor cleans up after
        it)."""
        return not self.replicas

    def acknowledge(self, sent: Iterable[ReplicaReport]) -> None:
        """The server has these reports: forget the replicas whose report was final (once their
        whole log is shipped) and let their supervisors go."""
        for r in sent:
            rep = self.replicas.get((r.job_id, r.replica))
            if rep is None or r.state not in FINAL_REPLICA_STATES or rep.state != r.state:
                continue
            if rep.run_dir is not None and rep.shipped < _size(rep.log_path):
                continue  # its last bytes are not on the server yet: again next heartbeat
            if rep.run_dir is not None:  # a run (an answer or a placeholder held none)
                self._done_allocations[rep.work.assignment.allocation_id] = r
            del self.replicas[rep.key]
            self._collect(rep)

    def _collect(self, rep: Replica) -> None:
        """The run's directory goes (its supervisor removes it, or this agent when there is no
        supervisor any more); its log stays, as the agent's copy under ``logs/``."""
        if rep.spec is not None and (rep.spec.secrets_dir or rep.spec.pull_auth):
            secret_files.remove(self.secrets_root, rep.spec)
        if rep.spec is not None and self.mps is not None:
            self.mps.detach(rep.spec.slug)
        if rep.run_dir is None:
            return
        logs = self.work_dir / "logs"
        w = rep.work
        kept = logs / f"{w.job_id}-{w.replica}-{w.assignment.allocation_id}-{w.attempt}.log"
        with contextlib.suppress(OSError):
            logs.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(rep.run_dir.log, kept)
        with contextlib.suppress(OSError):
            rd.write_atomic(rep.run_dir.collected, b"")
        alive = (
            rep.supervisor.poll() is None
            if rep.supervisor is not None
            else rep.status is not None and rd.is_supervisor(rep.run_dir, rep.status)
        )
        if not alive:
            rd.remove(rep.run_dir)

    def forget_copies(self, job_id: int) -> None:
        """Remove this node's copies of job ``job_id``'s finished logs (``logs/``): the server
        forgot the job (retention), and inside ``xpupool up`` they are on the server's disk."""
        for copy in (self.work_dir / "logs").glob(f"{job_id}-*.log"):
            copy.unlink(missing_ok=True)

    def ship_logs(self, send: LogSend, max_chunk: int = 1 << 20) -> None:
        """Send each replica's new output; a failed send is retried on the next call (the
        offset only moves on success)."""
        for rep in self.replicas.values():
            if rep.run_dir is None and rep.log_path == Path(os.devnull):
                continue
            size = _size(rep.log_path)
            while rep.shipped < size:
                try:
                    with rep.log_path.open("rb") as f:
                        # bytes the log rotated away before they were sent are skipped: the
                        # server sees the gap in the offset (log_rotation.py)
                        skipped, chunk = read_kept(f.fileno(), rep.shipped, max_chunk)
                except OSError:
                    break
                chunk = chunk[: max(size - rep.shipped - skipped, 0)]
                if not chunk:
                    break
                rep.shipped += skipped
                send(rep.work.job_id, rep.work.replica, chunk, rep.shipped, rep.work.attempt)
                rep.shipped += len(chunk)
                if rep.run_dir is not None:
                    with contextlib.suppress(OSError):
                        rd.write_atomic(rep.run_dir.shipped, str(rep.shipped).encode())

    def given_devices(self) -> set[str]:
        """The device UUIDs of the replicas this node was given and that have not ended: what
        a re-cut must not destroy (``recut.py``)."""
        return {
            d.uuid
            for rep in self.replicas.values()
            if rep.state not in FINAL_REPLICA_STATES
            for d in rep.work.assignment.devices
        }

    def running_groups(self) -> dict[tuple[int, int], int]:
        """Process group of every replica that still has processes: ``{(job, replica): pgid}``."""
        return {
            rep.key: rep.pid
            for rep in self.replicas.values()
            if rep.pid is not None and rep.state not in FINAL_REPLICA_STATES
        }

    def containers(self) -> dict[str, tuple[int, int]]:
        """The container id of every running image replica: ``{id: (job, replica)}``, read
        from the ``--cidfile`` its runtime wrote (none yet: not in the map)."""
        out: dict[str, tuple[int, int]] = {}
        for rep in self.replicas.values():
            if rep.run_dir is None or rep.state in FINAL_REPLICA_STATES:
                continue
            try:
                cid = rep.run_dir.container_id.read_text().strip()
            except OSError:
                continue
            if cid:
                out[cid] = rep.key
        return out

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop every replica and wait for them to go (up to ``timeout_s``, default the grace
        period plus five seconds); used when the server gives this node to no one through this
        agent any more. A graceful stop of the agent does not call it: replicas keep running."""
        for key in list(self.replicas):
            self.stop(*key)
        deadline = self.clock() + (self.grace_s + 5.0 if timeout_s is None else timeout_s)
        while self.clock() < deadline:
            self.poll()
            if all(rep.state in FINAL_REPLICA_STATES for rep in self.replicas.values()):
                break
            time.sleep(0.05)

    # ------------------------------------------------------------------ after a restart
    def reattach(self) -> None:
        """Take back the runs a previous agent left: a live supervisor (the same process: pid
        and start time, and its directory in its command line) is watched again, a finished run
        is reported, anything else (no status, a pid now someone else's) is removed. Of several
        runs of one replica, the latest attempt is kept; older ones are stopped and let go."""
        for d in rd.replica_dirs(self.work_dir):
            status = rd.read_status(d)
            try:
                work = Work.model_validate_json(d.work.read_bytes())
            except (OSError, ValidationError):
                work = None
            live = status is not None and rd.is_supervisor(d, status)
            if work is None or status is None or not (live or status.final):
                log.warning("%s: no supervisor of it is left; not adopted", d.path)
                if status is not None and live:
                    rd.request_stop(d, self.grace_s)
                else:
                    rd.remove(d)
                continue
            rep = Replica(work, d.log, run_dir=d, status=status, shipped=rd.read_shipped(d))
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                rep.spec = spec_file.loads(d.spec.read_bytes()).spec  # its ports stay held
            self._read(rep)
            older = self.replicas.get(rep.key)
            if older is not None and older.run_dir is not None:
                with contextlib.suppress(OSError):
                    rd.request_stop(older.run_dir, self.grace_s)
                self._collect(older)
            self.replicas[rep.key] = rep
            log.info(
                "job %d replica %d attempt %d: re-attached (%s, pid %s)",
                *rep.key,
                work.attempt,
                rep.state,
                rep.pid,
            )
        runs = {r.spec.slug for r in self.replicas.values() if r.spec is not None}
        for slug in secret_files.remove_leftovers(self.secrets_root, runs):
            log.warning("secrets of run %s: left by a run no supervisor holds; removed", slug)
        self._remove_leftover_containers()
        if self.mps is not None:
            self.mps.adopt(r.spec for r in self.replicas.values() if r.spec is not None)

    def _remove_leftover_containers(self) -> None:
        """Containers of this node's runs that no supervisor holds any more (it died with the
        agent: its client died with it, the container did not) are removed, found by the
        ``xpupool.owner`` label, this runner's work directory: never another agent's or another
        pool's. When the spec of a run it keeps cannot be read, nothing is removed."""
        if not self.settings.runtime:
            return
        from xpupool.agent.launch.container import ContainerBackend, container_name

        keep: set[str] = set()
        for rep in self.replicas.values():
            if rep.run_dir is None:
                continue
            try:
                keep.add(container_name(spec_file.loads(rep.run_dir.spec.read_bytes()).spec))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "%s: unreadable spec (%s): no leftover container removed", rep.run_dir.path, exc
                )
                return
        for name in ContainerBackend(self.settings).remove_leftovers(self.work_dir, keep):
            log.warning("container %s: left by a run no supervisor holds; removed", name)


def _supervisor_ended(rep: Replica) -> str:
    """Why ``rep`` failed when its supervisor ended without a final status: its own last line
    (``supervisor: cannot write ...``, or a traceback's last line), else how it ended; never an
    exit code of the replica's, which has none. Before the replica started, the reason is the
    supervisor's alone."""
    said = _last_line(rep.run_dir.supervisor_log) if rep.run_dir is not None else ""
    if said and not said.startswith("supervisor: "):
        said = f"supervisor: {said}"
    code = rep.supervisor.returncode if rep.supervisor is not None else None
    if rep.pid is None:  # nothing of the job ran
        if said:
            return said
        how = "ended" if code is None else _how_it_ended(code)
        return f"supervisor: {how} before it started the replica"
    return f"its supervisor ended before it did ({said or _how_it_ended(code)})"


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "ended"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def _last_line(path: Path, tail_bytes: int = 4096) -> str:
    """The last non-empty line of ``path`` (its end only: a supervisor's log is small, but
    need not be), or "" when there is none."""
    try:
        with path.open("rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - tail_bytes, 0))
            tail = f.read()
    except OSError:
        return ""
    lines = [line.strip() for line in tail.decode(errors="replace").splitlines()]
    return next((line for line in reversed(lines) if line), "")


def _superseded(done: ReplicaReport, work: Work) -> bool:
    """``done`` is a run of this same replica that this agent stopped because ``work``, a later
    attempt on the same allocation, was handed to it (the server believed the run gone: a
    heartbeat that did not list it): that attempt is started, not answered with the stopped run
    (which would fail the job)."""
    return (
        (done.job_id, done.replica) == (work.job_id, work.replica)
        and done.state is ReplicaState.STOPPED
        and done.attempt is not None
        and work.attempt > done.attempt
    )


def _spawn(command: tuple[str, ...], d: rd.ReplicaDir, attempt: int) -> subprocess.Popen[bytes]:
    """The supervisor of run ``d``: a session of its own (a signal to the agent's group does
    not reach it) and no parent-death signal, so it outlives the agent. Its output (only ever
    its own failure) goes to ``supervisor.log``, read back as the reason when it ends early."""
    out = os.open(d.supervisor_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    env = dict(os.environ)
    if env.get("PYTHONPATH"):  # it runs in /: a relative entry would no longer find xpupool
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p for p in parts)
    try:
        return subprocess.Popen(
            [*command, str(d.path), str(attempt)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,
            cwd="/",  # holds no directory of the agent's busy
        )
    finally:
        os.close(out)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _placeholder(job_id: int, replica: int, node: str) -> Work:
    from xpupool.server.schemas.agent_protocol import ReplicaAssignment

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
