"""One replica's supervisor: ``python -m xpupool.agent.supervisor DIR`` (what containerd's shim is
to a container).

The agent starts one per replica, in a session of its own and not tied to the agent, so that the
replica outlives a restart of the agent or of the server. The supervisor starts the replica from
the launch specification in ``DIR`` (:mod:`xpupool.agent.replica_dir`) through the same back end
the agent would use (the replica still dies with its supervisor: PR_SET_PDEATHSIG), owns its log,
and writes its status. It holds the replica's lease: once the lease file's time (CLOCK_MONOTONIC)
has passed without the agent moving it forward, it stops the replica (SIGTERM, SIGKILL after the
grace period the server counts on) and records ``lease_expired``, so an agent cut off from the
server leaves nothing running by the time the server runs the job elsewhere. A stop the agent asks
for (the ``stop`` file) or a SIGTERM of the supervisor stops it the same way. The status says
stopped only once nothing of the replica is left. A replica that ended on its own is recorded
and the supervisor waits for the agent to collect the result (or, the lease over, a bounded
time: the status stays on disk for an agent that comes back later).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

from xpupool.agent import replica_dir as rd
from xpupool.agent.launch import spec_file
from xpupool.agent.launch.backend import Backend, Launched, backend_for
from xpupool.agent.launch.process import write_log_line
from xpupool.agent.launch.spec import LaunchError, LaunchStoppedError
from xpupool.model.stopping import CHECKPOINT_LEAD_S, signal_number

POLL_S = 0.05
STEP_EVERY_S = 2.0  # a start's step (an image's pull) is written at most this often after its first
LINGER_AFTER_LEASE_S = 10.0  # a finished run's supervisor waits this long past its lease


class SupervisorError(Exception):
    """The supervisor cannot do its own part (its files); ``main`` prints it as one line,
    ``supervisor: <this>``, which the agent reads back from ``supervisor.log`` as the reason."""


class Supervisor:
    def __init__(self, d: rd.ReplicaDir, attempt: int) -> None:
        self.d = d
        pid = os.getpid()
        started = rd.process_started(pid)
        self.status = rd.SupervisorStatus(pid, started or 0, attempt)
        self.signalled = False
        self.resized = rd.resize_signal_asked(d)  # carried out (one from before a restart too)
        self.step_written = float("-inf")
        self.step_pending = ""

    def write(self, **changes: object) -> None:
        self.status = replace(self.status, **changes)  # type: ignore[arg-type]
        try:
            rd.write_status(self.d, self.status)
        except OSError as exc:  # without its status the agent can learn nothing of the run
            detail = exc.strerror or str(exc)
            raise SupervisorError(f"cannot write {self.d.status}: {detail}") from None

    def run(self) -> int:
        self.write()
        try:
            f = spec_file.loads(self.d.spec.read_bytes())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.write(
                state="failed", reason=f"unreadable launch spec: {exc}", stop_kind="start_failed"
            )
            return 1
        if self.signalled or time.monotonic() >= rd.read_lease(self.d):
            kind: rd.StopKind = "signalled" if self.signalled else "lease_expired"
            self.write(state="stopped", reason=f"not started ({kind})", stop_kind=kind)
            return self.linger()
        try:
            backend = backend_for(f.backend, f.settings)
            launched = backend.start(f.spec, self._stop_asked, self._step)
        except LaunchStoppedError as exc:
            write_log_line(f.spec.log_path, exc.reason)
            kind = self._stop_kind() or "requested"
            self.write(state="stopped", reason=f"stopped ({exc.reason})", stop_kind=kind)
            return self.linger()
        except LaunchError as exc:
            write_log_line(f.spec.log_path, exc.reason)
            self.write(state="failed", reason=exc.reason, stop_kind="start_failed")
            return self.linger()
        self.write(state="running", replica_pid=launched.pid, limits=launched.limits)
        self.watch(backend, launched, f.lease_grace_s)
        return self.linger()

    def _stop_kind(self) -> rd.StopKind:
        """Why the replica is to stop before it ran: asked for, signalled, or its lease over;
        "" while none of them."""
        if rd.stop_requested(self.d) is not None:
            return "requested"
        if self.signalled:
            return "signalled"
        return "lease_expired" if time.monotonic() >= rd.read_lease(self.d) else ""

    def _stop_asked(self) -> bool:
        """For a start with a long step before the replica runs (an image's pull): a stop
        asked for meanwhile gives the start up instead of waiting for the step's end. (Also
        the moment a step held back by :meth:`_step` is written: the pull calls it often.)"""
        self._write_step()
        return self._stop_kind() != ""

    def _step(self, text: str) -> None:
        """What the start is doing (an image's pull), into the status the agent reports from:
        its first step at once, later ones every :data:`STEP_EVERY_S` at most (a pull of many
        layers); the last one held back is written by the pull's next stop check."""
        self.step_pending = text
        self._write_step()

    def _write_step(self) -> None:
        text, now = self.step_pending, time.monotonic()
        if text == self.status.step:
            return
        if not self.status.step or now >= self.step_written + STEP_EVERY_S:
            self.step_written = now
            self.write(step=text)

    def watch(self, backend: Backend, launched: Launched, lease_grace_s: float) -> None:
        """Until nothing of the replica is left: reap its leader, carry out a stop (asked for,
        signalled, or the lease's end), escalate to SIGKILL after the grace period. A stop the
        agent asked for with the job's checkpoint signal sends it first, SIGTERM
        ``CHECKPOINT_LEAD_S`` later, and SIGKILL the grace period after SIGTERM."""
        stopping: rd.StopKind = ""
        kill_at = 0.0
        term_at: float | None = None  # when SIGTERM is due (a checkpoint signal goes first)
        grace = 0.0
        while True:
            now = time.monotonic()
            if not self.status.leader_done and launched.proc.poll() is not None:
                code = launched.proc.returncode
                reason = (
                    f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
                )
                if backend.oom_killed(launched):
                    reason += (
                        f": out of memory (over its memory={launched.spec.memory_mib}Mi limit)"
                    )
                self.write(
                    leader_done=True, exit_code=128 - code if code < 0 else code, reason=reason
                )
                if not stopping:
                    backend.signal(launched, signal.SIGKILL)  # what the replica left behind
            if not stopping:
                asked = rd.stop_requested(self.d)
                if asked is not None or self.signalled:
                    stopping, grace = (
                        ("requested" if asked is not None else "signalled"),
                        asked or 0.0,
                    )
                    if self.signalled and asked is None:
                        grace = lease_grace_s
                elif now >= rd.read_lease(self.d) and not self.status.leader_done:
                    stopping, grace = "lease_expired", lease_grace_s
                if stopping:
                    self.write(stop_kind=stopping)
                    term_at = now
                    asked_signal = rd.checkpoint_signal_asked(self.d) if asked is not None else None
                    if asked_signal is not None:  # the job's checkpoint signal, then SIGTERM
                        backend.signal(launched, signal_number(asked_signal))
                        term_at = now + CHECKPOINT_LEAD_S
                    kill_at = term_at + grace
            if not stopping and not self.status.leader_done:
                self._resize_signal(backend, launched)
            if term_at is not None and now >= term_at:
                term_at = None
                backend.signal(launched, signal.SIGTERM)
            if stopping and term_at is None and now >= kill_at:
                if backend.alive(launched):
                    backend.signal(launched, signal.SIGKILL)
                kill_at = now + max(grace, 0.1)  # again later if something survives
            if self.status.leader_done and not backend.alive(launched):
                break
            time.sleep(POLL_S)
        if launched.pump is not None:
            launched.pump.join(5.0)  # every byte of its output in the log before the status
        for _ in range(50):  # a busy cgroup or a runtime that does not answer: again, a while
            backend.cleanup(launched)
            if launched.cleaned:
                break
            time.sleep(0.1)
        if stopping:
            cause = {"lease_expired": "lease expired; ", "signalled": "supervisor signalled; "}
            text = f"{cause.get(stopping, '')}{self.status.reason}"
            self.write(state="stopped", reason=f"stopped ({text})")
        else:
            self.write(state="succeeded" if self.status.exit_code == 0 else "failed")

    def _resize_signal(self, backend: Backend, launched: Launched) -> None:
        """Send the signal the agent asked for after rewriting an elastic job's size file, once
        per request (agent/elastic_size.py)."""
        asked = rd.resize_signal_asked(self.d)
        if asked is None or asked == self.resized:
            return
        self.resized = asked
        try:
            number = signal_number(asked[1])
        except AttributeError:
            return  # not a signal of this platform
        backend.signal(launched, number)

    def linger(self) -> int:
        """Wait for the agent to collect the result, then remove the directory; give up once
        the lease has been over for :data:`LINGER_AFTER_LEASE_S` (the status stays)."""
        while True:
            if self.d.collected.exists():
                rd.remove(self.d)
                return 0
            if time.monotonic() >= rd.read_lease(self.d) + LINGER_AFTER_LEASE_S:
                return 0
            time.sleep(POLL_S * 4)


def main(argv: list[str]) -> int:
    """``DIR ATTEMPT``: supervise the run in DIR."""
    from xpupool.agent.launch.guard import protect_process

    protect_process()  # as the agent: a job of this uid cannot read this process's memory
    d = rd.ReplicaDir(Path(argv[0]))
    sup = Supervisor(d, int(argv[1]))

    def _term(_signum: int, _frame: FrameType | None) -> None:
        sup.signalled = True

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the agent, not us
    try:
        return sup.run()
    except SupervisorError as exc:  # one line, the agent's reason (anything else: a traceback)
        print(f"supervisor: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
