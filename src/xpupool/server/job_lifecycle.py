"""The job lifecycle: explicit phases and stop causes, and the one function that moves a job.

Every path that changes a job (submission, admission and placement, an agent's report, cancel,
preemption, a lost node, an allocation set aside on start, a stored job the server cannot run,
a run past its time limit, the end of a run) describes what happened as an event and asks
:func:`transition` what follows. The function is pure: it sees the job's status and the event and
returns an :class:`Outcome` (the new phase, the stop cause, whether to release the job's devices,
requeue it, count a retry, wait before placing it again) or refuses the move with
:class:`IllegalTransition`. ``ControlPlane.apply`` is its only caller that stores: it writes the
outcome and the event row in the caller's transaction, then acts on memory; agents are told to
stop processes only by the heartbeat replies that read the stored cause, so a stop acknowledged
to a user survives a crash of the server. A silent node's jobs are freed only once the lease on
their replicas has surely run out (:class:`LeaseExpired`), and a run reported after a restart is
adopted (:class:`Adopt`), not run again (docs/jobs.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xpupool.model.errors import Conflict
from xpupool.server.schemas.jobs import (
    DEFAULT_BACKOFF_MAX_S,
    DEFAULT_BACKOFF_S,
    DEFAULT_RETRY_ON,
    FINAL_STATES,
    HOLDING_STATES,
    JobPhase,
    RetryCause,
    StopCause,
)

P = JobPhase
STOPPING = "stopping: "  # how a job's reason starts while its replicas are stopped


class IllegalTransition(Conflict):
    """``event`` cannot happen to a job in ``phase`` (409); nothing was changed."""

    def __init__(self, phase: JobPhase | None, event: Event) -> None:
        self.phase, self.event = phase, event
        where = "a job not stored yet" if phase is None else f"a {phase.value} job"
        super().__init__(f"{type(event).__name__.lower()} is not possible for {where}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a job runs again: after a cause in ``retry_on``, at most ``max_retries`` times
    (None: no limit); a retry after a non-zero exit waits ``backoff_s``, doubled per retry used,
    at most ``backoff_max_s`` (a node lost or a preemption is not the job's fault: no wait)."""

    retry_on: frozenset[RetryCause] = frozenset(DEFAULT_RETRY_ON)
    max_retries: int | None = None
    backoff_s: float = DEFAULT_BACKOFF_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What the transition needs to know of a job. ``stop``: its replicas are being stopped for
    that cause (``stop_reason`` says more); ``may_run``: an agent may have started a process, so
    a stop must wait for the agent's report that it is gone."""

    phase: JobPhase
    stop: StopCause | None = None
    stop_reason: str = ""
    may_run: bool = False
    retries: int = 0
    policy: RetryPolicy = field(default_factory=RetryPolicy)


# ---------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Submit:
    """A new job is stored: -> pending."""

    reason: str = "submitted"


@dataclass(frozen=True, slots=True)
class Admit:
    """Its queue admitted it (quota charged): pending -> admitted."""

    reason: str


@dataclass(frozen=True, slots=True)
class Schedule:
    """Every replica has its devices: admitted -> scheduled."""

    reason: str


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Its replicas are handed to agents for a new run (the ``attempt``-th): counted, the phase
    stays. Not while it is being stopped."""

    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class Start:
    """An agent reports a replica's process: admitted, scheduled or unknown -> running."""

    reason: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth an event that changes no phase (limits applied, over its memory, a
    priority lowered); ``sets_reason``: it also becomes the job's reason."""

    reason: str
    sets_reason: bool = True


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the job for ``cause``: at once when nothing of it can be running, else its replicas
    are stopped first (the cause is stored; :class:`Ended` finishes it)."""

    cause: StopCause
    reason: str


@dataclass(frozen=True, slots=True)
class Ended:
    """Every replica is over (the agents reported each one). ``failed``: some replica did not
    exit 0; ``reason``/``exit_code``: what the run ended with (None: no replica that failed has
    an exit code, e.g. its supervisor failed before starting it)."""

    failed: bool
    reason: str
    exit_code: int | None = 0


@dataclass(frozen=True, slots=True)
class Adopt:
    """A run an agent reports after a restart (of the server or of the agent) is the job's
    current attempt: taken as it is, with no new attempt, no log header and no run again. Not
    while it is being stopped."""

    reason: str


@dataclass(frozen=True, slots=True)
class Lost:
    """Its devices could not be restored on start (``SET_ASIDE``): nothing of it runs on them.
    A node that stops heartbeating frees its jobs only by :class:`LeaseExpired`."""

    cause: StopCause
    reason: str


@dataclass(frozen=True, slots=True)
class LeaseExpired:
    """Its node went silent and the lease on its replicas is over: their supervisors have
    stopped them. Legal only when that is sure: the node has been silent ``silent_s`` at least
    ``needed_s`` (lease, stop grace and a margin), or its agent ``reported`` a replica stopped
    by its lease. Until then the job keeps its devices, so no second copy starts elsewhere
    while the first may still run. Then as a lost node (``NODE_LOST``)."""

    reason: str
    silent_s: float = 0.0
    needed_s: float = 0.0
    reported: bool = False

    @property
    def sure(self) -> bool:
        return self.reported or self.silent_s >= self.needed_s


@dataclass(frozen=True, slots=True)
class SiteUnreachable:
    """Every node of its site stopped answering (``server/site_health.py``): scheduled or running
    -> unknown, its devices and quota kept, its stop (if any) kept. Nothing but the site's own
    word moves it on: a silence past the lease (:class:`LeaseExpired` not ``reported``) is then
    not enough, since the plane cannot tell a stopped run from one it no longer hears."""

    reason: str


@dataclass(frozen=True, slots=True)
class Reached:
    """Its site answers again with a report of its replicas: unknown -> running (the report
    itself then moves it on as usual: ended, stopped by its lease)."""

    reason: str


Event = (
    Submit
    | Admit
    | Schedule
    | Dispatch
    | Start
    | Note
    | Stop
    | Ended
    | Adopt
    | Lost
    | LeaseExpired
    | SiteUnreachable
    | Reached
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What follows an event. ``reason``: the event's text. ``stop_reason``: why the job is being
    stopped (with ``stop``), kept through every event until the stop ends it, so that a start or
    a note that arrives meanwhile (a cancel racing the start report, issue 43) neither becomes
    its final reason nor hides the stop. ``changed`` False: nothing to store (a second stop for
    a job being stopped). ``release``: give its allocations back now; ``requeue``: back to its
    queue, one retry counted when ``retried``, not placed for ``backoff_s`` seconds.
    ``attempt``: a run counted (``Dispatch``)."""

    phase: JobPhase
    reason: str
    stop: StopCause | None = None
    stop_reason: str = ""
    release: bool = False
    requeue: bool = False
    retried: bool = False
    backoff_s: float = 0.0
    exit_code: int | None = None
    attempt: int | None = None
    sets_reason: bool = True
    changed: bool = True

    @property
    def job_reason(self) -> str:
        """The job's own reason after this outcome: while its replicas are being stopped, the
        stop's (``stopping: <why>``) whatever the event says; else the event's."""
        if self.stop is not None and self.phase in HOLDING_STATES:
            return f"{STOPPING}{self.stop_reason}"
        return self.reason


# ---------------------------------------------------------------------------------- the function
def transition(job: JobStatus | None, event: Event) -> Outcome:
    """What ``event`` does to ``job`` (None: a job not stored yet). Raises
    :class:`IllegalTransition` for a move the lifecycle does not have: anything after a final
    phase, a placement of a job not pending, a start of one not placed, a retry cause on a
    pending job."""
    if job is None:
        if isinstance(event, Submit):
            return Outcome(P.PENDING, event.reason)
        raise IllegalTransition(None, event)
    phase = job.phase
    if phase in FINAL_STATES or isinstance(event, Submit):
        raise IllegalTransition(phase, event)
    if isinstance(event, Admit) and phase is P.PENDING:
        return Outcome(P.ADMITTED, event.reason)
    if isinstance(event, Schedule) and phase is P.ADMITTED:
        return Outcome(P.SCHEDULED, event.reason)
    if isinstance(event, Dispatch) and phase in HOLDING_STATES and job.stop is None:
        return Outcome(phase, event.reason, attempt=event.attempt, sets_reason=False)
    # a start or a note while the job is being stopped keeps the stop and its reason
    if isinstance(event, Start) and phase in (P.ADMITTED, P.SCHEDULED, P.UNKNOWN):
        return Outcome(P.RUNNING, event.reason, job.stop, job.stop_reason)
    if isinstance(event, Note):
        reason, sets = event.reason, event.sets_reason
        return Outcome(phase, reason, job.stop, job.stop_reason, sets_reason=sets)
    if isinstance(event, Stop):
        return _stop(job, event)
    if isinstance(event, Ended) and phase in HOLDING_STATES:
        if job.stop is not None:
            return _finish(job, job.stop, job.stop_reason or event.reason, event.exit_code)
        if event.failed:
            return _finish(job, StopCause.REPLICA_FAILED, event.reason, event.exit_code)
        return Outcome(P.SUCCEEDED, event.reason, release=True, exit_code=event.exit_code)
    if isinstance(event, Adopt) and phase in HOLDING_STATES and job.stop is None:
        return Outcome(phase, event.reason, sets_reason=False)
    if isinstance(event, SiteUnreachable) and phase in (P.SCHEDULED, P.RUNNING):
        return Outcome(P.UNKNOWN, event.reason, job.stop, job.stop_reason)
    if isinstance(event, Reached) and phase is P.UNKNOWN:
        return Outcome(P.RUNNING, event.reason, job.stop, job.stop_reason)
    if isinstance(event, LeaseExpired) and phase is P.UNKNOWN and not event.reported:
        return Outcome(phase, event.reason, changed=False)  # the plane's word alone: not enough
    lost = (isinstance(event, Lost) and event.cause is not StopCause.NODE_LOST) or (
        isinstance(event, LeaseExpired) and event.sure
    )
    if lost and phase in HOLDING_STATES:
        assert isinstance(event, (Lost, LeaseExpired))
        cause = event.cause if isinstance(event, Lost) else StopCause.NODE_LOST
        if job.stop is not None and job.stop not in (StopCause.NODE_LOST, StopCause.SET_ASIDE):
            return _finish(job, job.stop, f"{job.stop_reason}; {event.reason}")
        return _finish(job, cause, event.reason)
    raise IllegalTransition(phase, event)


def _stop(job: JobStatus, event: Stop) -> Outcome:
    cause = event.cause
    if job.phase is P.PENDING:
        if cause not in (StopCause.CANCELLED, StopCause.UNRUNNABLE):
            raise IllegalTransition(job.phase, event)
        return _finish(job, cause, event.reason)
    if job.stop is not None:
        if cause is StopCause.CANCELLED and job.stop is not StopCause.CANCELLED:
            # the user's word wins: a victim being stopped for preemption ends cancelled
            return Outcome(job.phase, f"{STOPPING}{event.reason}", cause, event.reason)
        return Outcome(job.phase, job.stop_reason, job.stop, job.stop_reason, changed=False)
    if not job.may_run or cause is StopCause.UNRUNNABLE:
        return _finish(job, cause, event.reason)  # nothing of it can be running
    return Outcome(job.phase, f"{STOPPING}{event.reason}", cause, event.reason)


_RETRIED_AS: dict[StopCause, RetryCause] = {
    StopCause.PREEMPTED: RetryCause.PREEMPTED,
    StopCause.NODE_LOST: RetryCause.NODE_LOST,
    StopCause.SET_ASIDE: RetryCause.NODE_LOST,
    StopCause.REPLICA_FAILED: RetryCause.EXIT_NONZERO,
}
_ENDS_AS: dict[StopCause, JobPhase] = {
    StopCause.CANCELLED: P.CANCELLED,
    StopCause.PREEMPTED: P.FAILED,
    StopCause.NODE_LOST: P.LOST,
    StopCause.SET_ASIDE: P.LOST,
    StopCause.MAX_RUNTIME: P.FAILED,
    StopCause.IDLE: P.FAILED,
    StopCause.REPLICA_FAILED: P.FAILED,
    StopCause.UNRUNNABLE: P.FAILED,
}


def _finish(job: JobStatus, cause: StopCause, reason: str, exit_code: int | None = None) -> Outcome:
    """Nothing of the job runs any more (or ever did): run it again if its policy retries
    ``cause`` and retries are left, else its final phase."""
    held = job.phase is not P.PENDING
    retry = _RETRIED_AS.get(cause)
    policy = job.policy
    if held and retry is not None and retry in policy.retry_on:
        if policy.max_retries is None or job.retries < policy.max_retries:
            wait = 0.0
            if retry is RetryCause.EXIT_NONZERO:
                wait = min(policy.backoff_max_s, policy.backoff_s * 2.0**job.retries)
                reason = f"{reason}; retry {job.retries + 1} in {wait:g} s"
            return Outcome(
                P.PENDING, reason, release=True, requeue=True, retried=True, backoff_s=wait
            )
        reason = f"{reason}; no retries left (max_retries {policy.max_retries})"
    code = exit_code if cause is StopCause.REPLICA_FAILED else None
    return Outcome(_ENDS_AS[cause], reason, cause, reason, release=held, exit_code=code)


def retry_policy(row: object) -> RetryPolicy:
    """A stored job's retry policy; a job stored before there were policies gets the defaults
    (requeued after a lost node, if its on_node_lost says so, and after a preemption)."""
    r = dict(row)  # type: ignore[call-overload]
    causes = DEFAULT_RETRY_ON if r.get("retry_on") is None else r["retry_on"]
    retry_on = frozenset(RetryCause(c) for c in causes)
    if r.get("on_node_lost") == "fail":
        retry_on -= {RetryCause.NODE_LOST}
    base = r.get("backoff_s")
    cap = r.get("backoff_max_s")
    return RetryPolicy(
        retry_on,
        r.get("max_retries"),
        DEFAULT_BACKOFF_S if base is None else float(base),
        DEFAULT_BACKOFF_MAX_S if cap is None else float(cap),
    )
