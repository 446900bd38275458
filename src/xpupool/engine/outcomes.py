"""Why pending work waits, whom it preempts, and why a victim stops: stable codes with data fields,
one text table, and one :func:`render` for every edge.

The scheduling cycle and admission (``engine/cycle/``) return these values; the server's job
reasons and events, the API and CLI views, kube events and the simulator turn them into text
here and nowhere else, as ``engine/reasons.py`` does for a node's filter reasons (STYLE §9.2:
never flatten to text and parse it back). The codes are Kueue's requeue reasons in spirit: a
caller branches on :attr:`code` or the type, never on the words.

The text is what the server has always stored as a job's reason, so old rows and new ones read
alike; a wait that wraps another (``...; preempting 2 lower-priority job(s)``) renders the inner
outcome first.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import ClassVar

from xpupool.engine.reasons import Unschedulable
from xpupool.model.quantity import format_mib, format_permille


class Code(IntEnum):
    """What kind of outcome, stable across releases (logs and tests name these)."""

    QUOTA_EXCEEDED = 1
    QUOTA_CEILING = 2
    NO_NODE_FITS = 3
    GANG_INCOMPLETE = 4
    NO_USABLE_FLAVOR = 5
    NOT_ADMITTED = 6
    INADMISSIBLE = 7
    NEVER_FITS = 8
    WAITING_FOR_VICTIMS = 9
    PREEMPTING_LOWER_PRIORITY = 10
    RECLAIMING = 11
    PREEMPTED_BY_PRIORITY = 12
    PREEMPTED_BY_RECLAIM = 13
    CANNOT_SCHEDULE = 14
    CONTAINER_DOES_NOT_FIT = 15
    NOT_IN_POOL = 16
    ON_NODE = 17
    NAMESPACE_QUOTA = 18
    FIELD_NEVER_FITS = 19
    GANG_TOO_FEW_FIT = 20
    GANG_MEMBER_DOES_NOT_FIT = 21
    GANG_NO_FREE_PLACE = 22
    GANG_PLACE_ELSEWHERE = 23
    GANG_RELEASED = 24
    GANG_NO_PLACE_FOR_POD = 25
    GANG_CONFLICT = 26
    GANG_SIZE_MISMATCH = 27
    GANG_OTHER_DEVICES = 28
    GANG_BIND_TIMEOUT = 29
    GANG_MEMBERS_LATE = 30
    GANG_ANNOTATION_FAILED = 31
    GANG_NEEDS_UID = 32
    GREW = 33
    SHRANK = 34
    SHRINKING_ELASTIC = 35
    RESERVATION_AHEAD = 36
    RESERVATION_CLOSED = 37
    PREEMPTED_BY_RESERVATION = 38
    RECUTTING_CARDS = 39
    DEFRAGMENTING = 40
    MOVED_TO_DEFRAGMENT = 41
    MOVED_TO_FASTER = 45  # 42..44 are other work's (re-cut, QoS, defragmentation on the server)
    CONSOLIDATING = 46


INADMISSIBLE = "inadmissible: "
"""How the text of an :class:`Inadmissible` wait begins. Job reasons are stored as text, so a
reason read back from the store (a row written before a restart) is recognised by it."""

TEXT: dict[Code, str] = {
    Code.QUOTA_EXCEEDED: (
        "{at}{resource} quota: {used} used + {asked} asked > {nominal} nominal + "
        "{borrowable} borrowable"
    ),
    Code.QUOTA_CEILING: (
        "{at}{resource} quota: {asked} asked > {nominal} nominal + {borrowable} borrowable at most"
    ),
    Code.NO_NODE_FITS: "{at}{nodes}",
    Code.GANG_INCOMPLETE: "{nodes}",
    Code.NO_USABLE_FLAVOR: "no flavour of this queue has devices the request can use",
    Code.NOT_ADMITTED: "{causes}",
    Code.INADMISSIBLE: INADMISSIBLE + "{causes}",
    Code.NEVER_FITS: "unschedulable: nothing in the pool can hold it ({detail})",
    Code.WAITING_FOR_VICTIMS: "{cause}; waiting for preempted job(s) {victims} to stop",
    Code.PREEMPTING_LOWER_PRIORITY: "{cause}; preempting {count} lower-priority job(s)",
    Code.RECLAIMING: "{cause}; reclaiming quota lent to {borrowers}: preempting {count} job(s)",
    Code.PREEMPTED_BY_PRIORITY: "preempted by job {by} (priority {priority} > {victim_priority})",
    Code.PREEMPTED_BY_RECLAIM: "preempted by job {by}: queue {queue} reclaims the quota it lent",
    Code.CANNOT_SCHEDULE: "cannot be scheduled: {error}",
    Code.CONTAINER_DOES_NOT_FIT: "container {container}: {why}",
    Code.NOT_IN_POOL: "node has no device xpupool manages",
    Code.ON_NODE: "{node}: {cause}",
    Code.NAMESPACE_QUOTA: (
        "quota of namespace {namespace}: {resource} {held} of {limit} {unit} held, "
        "the pod asks {asked}"
    ),
    Code.FIELD_NEVER_FITS: "{field}: {detail}",
    Code.GANG_TOO_FEW_FIT: "gang {key}: {fit} of {size} fit ({why})",
    Code.GANG_MEMBER_DOES_NOT_FIT: (
        "gang {key}: member {member} of {size}: containers do not fit together"
    ),
    Code.GANG_NO_FREE_PLACE: "gang {key}: no free place of the group on {where}",
    Code.GANG_PLACE_ELSEWHERE: "gang {key}: this pod's place is on {node}{not_asked}",
    Code.GANG_RELEASED: "gang {key}: no places held for the group (released); retrying",
    Code.GANG_NO_PLACE_FOR_POD: "gang {key}: no place held for this pod",
    Code.GANG_CONFLICT: "gang {key}: {error}",
    Code.GANG_SIZE_MISMATCH: "gang {key}: this pod claims size {claimed}, the group holds {size}",
    Code.GANG_OTHER_DEVICES: (
        "gang {key}: this pod asks for other devices than the group's places hold"
    ),
    Code.GANG_BIND_TIMEOUT: (
        "gang {key}: {ready} of {size} members reached bind within {wait_s:g}s; "
        "every place released"
    ),
    Code.GANG_MEMBERS_LATE: "gang {key}: members did not reach bind in time",
    Code.GANG_ANNOTATION_FAILED: "gang {key}: annotating {pod} failed: {error}",
    Code.GANG_NEEDS_UID: "a gang member needs its metadata.uid",
    Code.GREW: "grew to {replicas} of {max_replicas} replicas into idle capacity",
    Code.SHRANK: "shrank to {replicas} replicas (at least {min_replicas}): job {by} needed the room",
    Code.SHRINKING_ELASTIC: "{cause}; shrinking {count} extra replica(s) of elastic job(s) {jobs}",
    Code.RESERVATION_AHEAD: "reservation {reservation} begins at {start_s:g} s",
    Code.RESERVATION_CLOSED: "reservation {reservation} {why}: nothing runs in it now",
    Code.PREEMPTED_BY_RESERVATION: (
        "preempted: reservation {reservation} begins and takes back the cards it lent"
    ),
    Code.RECUTTING_CARDS: "{cause}; re-cutting {cuts} for this job",
    Code.DEFRAGMENTING: "{cause}; moving job(s) {jobs} to defragment",
    Code.MOVED_TO_DEFRAGMENT: (
        "moved to defragment: checkpointed, stopped and requeued so that job {by} fits"
    ),
    Code.MOVED_TO_FASTER: (
        "moved to faster cards ({model}, {speedup:g}x): ends about {gain_min} min sooner; "
        "checkpointed, stopped and restarted there"
    ),
    Code.CONSOLIDATING: (
        "consolidating: freeing node {node} for {cards}-card jobs; checkpointed, stopped and "
        "restarted on a node already in use"
    ),
}

# how a quota outcome names each resource (``admission.Resource`` values) and writes its amounts:
# as requests write them
_LABEL = {"devices": "devices", "device_memory_mib": "device memory", "cores_permille": "cores"}


def _amount(resource: str, amount: int) -> str:
    """``amount`` of ``resource`` in the units of a request: cards, MiB/GiB, % of a card."""
    if resource == "device_memory_mib":
        return format_mib(amount)
    if resource == "cores_permille":
        return format_permille(amount)
    return str(amount)


# ---------------------------------------------------------------------- why a flavour refused


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    """``flavor``'s quota of ``resource`` (an ``admission.Resource``) has no room now for
    ``asked``: ``used`` already, ``nominal`` its own, ``borrowable`` what the cohort lends."""

    code: ClassVar[Code] = Code.QUOTA_EXCEEDED
    flavor: str
    resource: str
    used: int
    asked: int
    nominal: int
    borrowable: int


@dataclass(frozen=True, slots=True)
class QuotaCeiling:
    """``asked`` passes the most of ``resource`` ``flavor``'s quota can ever hold, with every
    queue of its cohort empty: ``nominal`` plus ``borrowable`` at most."""

    code: ClassVar[Code] = Code.QUOTA_CEILING
    flavor: str
    resource: str
    asked: int
    nominal: int
    borrowable: int


@dataclass(frozen=True, slots=True)
class NoNodeFits:
    """The engine found no room for a replica (``why``: the filter reasons counted over the
    nodes), on ``flavor``'s devices, or anywhere when ``flavor`` is empty."""

    code: ClassVar[Code] = Code.NO_NODE_FITS
    why: Unschedulable
    flavor: str = ""


FlavorCause = QuotaExceeded | QuotaCeiling | NoNodeFits


# ---------------------------------------------------------------------- why a job waits


@dataclass(frozen=True, slots=True)
class GangIncomplete:
    """Some replicas of a gang were placed, not all (``why``: the first that was not); what was
    placed is given back, so a job runs whole or waits."""

    code: ClassVar[Code] = Code.GANG_INCOMPLETE
    why: Unschedulable


@dataclass(frozen=True, slots=True)
class NoUsableFlavor:
    """No flavour of the queue has devices the request can use."""

    code: ClassVar[Code] = Code.NO_USABLE_FLAVOR


@dataclass(frozen=True, slots=True)
class NotAdmitted:
    """Every flavour tried refused, each for its cause, in the queue's order."""

    code: ClassVar[Code] = Code.NOT_ADMITTED
    causes: tuple[FlavorCause, ...]


@dataclass(frozen=True, slots=True)
class Inadmissible:
    """No future of the queue's quotas can admit it (Kueue's inadmissible workloads): only a
    quota change of its cohort can; ``causes`` are the ceilings it passes."""

    code: ClassVar[Code] = Code.INADMISSIBLE
    causes: tuple[QuotaCeiling, ...]


@dataclass(frozen=True, slots=True)
class NeverFits:
    """Nothing in the pool, even empty, can hold it (``detail``: the pool verdict's reason)."""

    code: ClassVar[Code] = Code.NEVER_FITS
    detail: str


@dataclass(frozen=True, slots=True)
class CannotSchedule:
    """The engine rejected the request outright (``error``: the exception's text)."""

    code: ClassVar[Code] = Code.CANNOT_SCHEDULE
    error: str


Refused = GangIncomplete | NoUsableFlavor | NotAdmitted | NoNodeFits
"""Why admission did not place a request now (``admission.Refusal`` and partial gangs)."""


@dataclass(frozen=True, slots=True)
class WaitingForVictims:
    """Still ``cause``, while the jobs it preempted earlier (``victims``, ids) are stopping: no
    more are picked until they are gone."""

    code: ClassVar[Code] = Code.WAITING_FOR_VICTIMS
    cause: Refused
    victims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReservationAhead:
    """Submitted into ``reservation``, whose window begins at ``start_s`` (the front's clock):
    it runs only inside it (``engine/cycle/reservations.py``)."""

    code: ClassVar[Code] = Code.RESERVATION_AHEAD
    reservation: str
    start_s: float


@dataclass(frozen=True, slots=True)
class ReservationClosed:
    """Submitted into ``reservation``, which has ended or is unknown (``why``): it will never
    run, and the front refuses it (fails the job) rather than keep it waiting."""

    code: ClassVar[Code] = Code.RESERVATION_CLOSED
    reservation: str
    why: str


ReservationCause = ReservationAhead | ReservationClosed

WaitCause = (
    Refused | Inadmissible | NeverFits | WaitingForVictims | CannotSchedule | ReservationCause
)


# ---------------------------------------------------------------------- preemption


@dataclass(frozen=True, slots=True)
class PreemptingLowerPriority:
    """``cause`` until ``count`` running jobs of lower priority stop for it."""

    code: ClassVar[Code] = Code.PREEMPTING_LOWER_PRIORITY
    cause: Refused
    count: int


@dataclass(frozen=True, slots=True)
class Reclaiming:
    """``cause`` until ``count`` jobs of the queues borrowing its quota (``borrowers``) stop:
    the lender takes back what it lent (Kueue's reclaimWithinCohort)."""

    code: ClassVar[Code] = Code.RECLAIMING
    cause: Refused
    borrowers: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Defragmenting:
    """``cause`` until the running jobs ``jobs`` (ids) are moved (checkpointed, stopped and
    requeued) so that it fits where they were (``engine/cycle/defrag.py``)."""

    code: ClassVar[Code] = Code.DEFRAGMENTING
    cause: Refused
    jobs: tuple[int, ...]


PreemptCause = PreemptingLowerPriority | Reclaiming | Defragmenting


@dataclass(frozen=True, slots=True)
class PreemptedByPriority:
    """A victim's stop: job ``by`` of ``priority`` needed its room (``victim_priority``)."""

    code: ClassVar[Code] = Code.PREEMPTED_BY_PRIORITY
    by: int
    priority: int
    victim_priority: int


@dataclass(frozen=True, slots=True)
class PreemptedByReclaim:
    """A victim's stop: job ``by`` of ``queue`` takes back quota its queue lent."""

    code: ClassVar[Code] = Code.PREEMPTED_BY_RECLAIM
    by: int
    queue: str


@dataclass(frozen=True, slots=True)
class PreemptedByReservation:
    """A victim's stop: it borrowed cards of ``reservation``, whose window begins."""

    code: ClassVar[Code] = Code.PREEMPTED_BY_RESERVATION
    reservation: str


@dataclass(frozen=True, slots=True)
class MovedToDefragment:
    """A moved job's stop: checkpointed, stopped and requeued so that job ``by`` fits; it is
    placed again by the cycle (``engine/cycle/defrag.py``)."""

    code: ClassVar[Code] = Code.MOVED_TO_DEFRAGMENT
    by: int


Preempted = PreemptedByPriority | PreemptedByReclaim | PreemptedByReservation | MovedToDefragment


@dataclass(frozen=True, slots=True)
class MovedToFaster:
    """A running job was moved to free cards of ``model`` where it runs ``speedup`` times as
    fast, ending about ``gain_s`` seconds sooner, the work lost since its checkpoint counted
    (``engine/cycle/faster_cards.py``)."""

    code: ClassVar[Code] = Code.MOVED_TO_FASTER
    model: str
    speedup: float
    gain_s: int


@dataclass(frozen=True, slots=True)
class Consolidating:
    """A running job was moved, in a quiet period, to free cards on ``node`` for the
    ``cards``-card jobs the learned workload expects (``engine/cycle/consolidate.py``)."""

    code: ClassVar[Code] = Code.CONSOLIDATING
    node: str
    cards: int


# ---------------------------------------------------------------------- elastic jobs


@dataclass(frozen=True, slots=True)
class Grew:
    """An elastic job took one more replica of idle capacity (``engine/cycle/elastic.py``):
    it holds ``replicas`` now, of at most ``max_replicas``."""

    code: ClassVar[Code] = Code.GREW
    job: int
    replicas: int
    max_replicas: int


@dataclass(frozen=True, slots=True)
class Shrank:
    """An elastic job gave back extra replicas: it holds ``replicas`` now (never fewer than
    ``min_replicas``) because job ``by`` needed the room."""

    code: ClassVar[Code] = Code.SHRANK
    job: int
    replicas: int
    min_replicas: int
    by: int


@dataclass(frozen=True, slots=True)
class ShrinkingElastic:
    """``cause`` until ``count`` extra replicas of the elastic jobs ``jobs`` (ids) are released:
    they go before any whole job is preempted."""

    code: ClassVar[Code] = Code.SHRINKING_ELASTIC
    cause: Refused
    count: int
    jobs: tuple[int, ...]


Resized = Grew | Shrank


# ---------------------------------------------------------------------- re-cutting cards


@dataclass(frozen=True, slots=True)
class RecuttingCards:
    """``cause`` until each card of ``cuts`` (``(card UUID, node, layout words)``) is re-cut
    into that layout for the job (``engine/cycle/recutting.py``): its partition profile is
    free nowhere, and re-cutting free slices makes one."""

    code: ClassVar[Code] = Code.RECUTTING_CARDS
    cause: Refused
    cuts: tuple[tuple[str, str, tuple[str, ...]], ...]


# ---------------------------------------------------------------------- placing a pod (k8s/)


@dataclass(frozen=True, slots=True)
class ContainerDoesNotFit:
    """A pod's ``container`` found no room beside the others on the node (``why``: the engine's
    refusal; its first filter reason names it)."""

    code: ClassVar[Code] = Code.CONTAINER_DOES_NOT_FIT
    container: str
    why: Unschedulable


@dataclass(frozen=True, slots=True)
class NotInPool:
    """The node holds no device this pool manages."""

    code: ClassVar[Code] = Code.NOT_IN_POOL


@dataclass(frozen=True, slots=True)
class OnNode:
    """``cause``, on ``node`` (a bind's or a nomination's node)."""

    code: ClassVar[Code] = Code.ON_NODE
    node: str
    cause: ContainerDoesNotFit | NotInPool


@dataclass(frozen=True, slots=True)
class NamespaceQuota:
    """A Kubernetes ResourceQuota of ``namespace`` on ``resource`` would be passed: ``held`` by
    its other pods plus ``asked`` by this one exceed ``limit`` (MiB for memory, else cores in
    the card type's units, ``cores_per_card`` of them a card)."""

    code: ClassVar[Code] = Code.NAMESPACE_QUOTA
    namespace: str
    resource: str
    held: int
    limit: int
    asked: int
    cores_per_card: int | None = None  # None: a memory resource, in MiB


@dataclass(frozen=True, slots=True)
class FieldNeverFits:
    """Nothing in the pool, even empty, can hold what the request's ``field`` asks (``detail``:
    the pool verdict's reason, ``engine/verdict.py``)."""

    code: ClassVar[Code] = Code.FIELD_NEVER_FITS
    field: str
    detail: str


PodRefusal = ContainerDoesNotFit | NotInPool | OnNode | NamespaceQuota | FieldNeverFits


# ---------------------------------------------------------------------- gangs in the extender
# ``key`` is the group's (namespace/name); see ``k8s/extender/gang.py`` for places and binds.


@dataclass(frozen=True, slots=True)
class GangTooFewFit:
    """Only ``fit`` of the group's ``size`` members fit now (``why``: the first that did not)."""

    code: ClassVar[Code] = Code.GANG_TOO_FEW_FIT
    key: str
    fit: int
    size: int
    why: Unschedulable


@dataclass(frozen=True, slots=True)
class GangMemberDoesNotFit:
    """Member ``member`` (from 1) of ``size``: the pod's containers do not fit beside its place."""

    code: ClassVar[Code] = Code.GANG_MEMBER_DOES_NOT_FIT
    key: str
    member: int
    size: int


@dataclass(frozen=True, slots=True)
class GangNoFreePlace:
    """Every place of the group on ``node`` (empty: on the nodes asked about) is taken."""

    code: ClassVar[Code] = Code.GANG_NO_FREE_PLACE
    key: str
    node: str = ""


@dataclass(frozen=True, slots=True)
class GangPlaceElsewhere:
    """This pod's place is on ``node``, not on ``asked`` (empty: not on the nodes asked about)."""

    code: ClassVar[Code] = Code.GANG_PLACE_ELSEWHERE
    key: str
    node: str
    asked: str = ""


@dataclass(frozen=True, slots=True)
class GangReleased:
    """The group holds no places (released): its members start over."""

    code: ClassVar[Code] = Code.GANG_RELEASED
    key: str


@dataclass(frozen=True, slots=True)
class GangNoPlaceForPod:
    """The pod reached bind holding no place of its group."""

    code: ClassVar[Code] = Code.GANG_NO_PLACE_FOR_POD
    key: str


@dataclass(frozen=True, slots=True)
class GangConflict:
    """A place could not be handed to the pod (``error``: the cluster view's conflict)."""

    code: ClassVar[Code] = Code.GANG_CONFLICT
    key: str
    error: str


@dataclass(frozen=True, slots=True)
class GangSizeMismatch:
    """The pod claims a group of ``claimed`` members; the group holds ``size`` places."""

    code: ClassVar[Code] = Code.GANG_SIZE_MISMATCH
    key: str
    claimed: int
    size: int


@dataclass(frozen=True, slots=True)
class GangOtherDevices:
    """The pod asks for other devices than the group's places were made for."""

    code: ClassVar[Code] = Code.GANG_OTHER_DEVICES
    key: str


@dataclass(frozen=True, slots=True)
class GangBindTimeout:
    """Only ``ready`` of ``size`` members reached bind within ``wait_s``: every place released."""

    code: ClassVar[Code] = Code.GANG_BIND_TIMEOUT
    key: str
    ready: int
    size: int
    wait_s: float


@dataclass(frozen=True, slots=True)
class GangMembersLate:
    """The group's deadline passed with no member waiting in bind: every place released."""

    code: ClassVar[Code] = Code.GANG_MEMBERS_LATE
    key: str


@dataclass(frozen=True, slots=True)
class GangAnnotationFailed:
    """Member ``pod`` (namespace/name) could not be annotated (``error``): the group goes back."""

    code: ClassVar[Code] = Code.GANG_ANNOTATION_FAILED
    key: str
    pod: str
    error: str


@dataclass(frozen=True, slots=True)
class GangNeedsUid:
    """The member has no ``metadata.uid``: its place could not be told from another's."""

    code: ClassVar[Code] = Code.GANG_NEEDS_UID


GangRefusal = (
    GangNeedsUid
    | GangTooFewFit
    | GangMemberDoesNotFit
    | GangNoFreePlace
    | GangPlaceElsewhere
    | GangReleased
    | GangNoPlaceForPod
    | GangConflict
    | GangSizeMismatch
    | GangOtherDevices
    | GangBindTimeout
    | GangMembersLate
    | GangAnnotationFailed
)

Outcome = (
    FlavorCause
    | WaitCause
    | PreemptCause
    | Preempted
    | PodRefusal
    | GangRefusal
    | Resized
    | ShrinkingElastic
    | RecuttingCards
    | MovedToFaster
    | Consolidating
)


def render(outcome: Outcome) -> str:
    """The text of ``outcome``: its code's line of :data:`TEXT`, filled from its fields."""
    return TEXT[outcome.code].format(**_fields(outcome))


def _fields(o: Outcome) -> dict[str, object]:
    """What :data:`TEXT` fills in for ``o``: amounts in request units, nested outcomes rendered."""
    if isinstance(o, QuotaExceeded | QuotaCeiling):
        r = o.resource
        values: dict[str, object] = {
            "at": f"{o.flavor}: ",
            "resource": _LABEL[r],
            "asked": _amount(r, o.asked),
            "nominal": _amount(r, o.nominal),
            "borrowable": _amount(r, o.borrowable),
        }
        if isinstance(o, QuotaExceeded):
            values["used"] = _amount(r, o.used)
        return values
    if isinstance(o, NoNodeFits):
        return {"at": f"{o.flavor}: " if o.flavor else "", "nodes": o.why.message}
    if isinstance(o, GangIncomplete):
        return {"nodes": o.why.message}
    if isinstance(o, NotAdmitted | Inadmissible):
        return {"causes": "; ".join(render(c) for c in o.causes)}
    if isinstance(o, WaitingForVictims):
        return {"cause": render(o.cause), "victims": list(o.victims)}
    if isinstance(o, PreemptingLowerPriority):
        return {"cause": render(o.cause), "count": o.count}
    if isinstance(o, Reclaiming):
        return {"cause": render(o.cause), "borrowers": ", ".join(o.borrowers), "count": o.count}
    if isinstance(o, NeverFits):
        return {"detail": o.detail}
    if isinstance(o, CannotSchedule):
        return {"error": o.error}
    if isinstance(o, PreemptedByPriority):
        return {"by": o.by, "priority": o.priority, "victim_priority": o.victim_priority}
    if isinstance(o, PreemptedByReclaim):
        return {"by": o.by, "queue": o.queue}
    if isinstance(o, Grew | Shrank):
        return {f.name: getattr(o, f.name) for f in fields(o)}
    if isinstance(o, ShrinkingElastic):
        return {"cause": render(o.cause), "count": o.count, "jobs": list(o.jobs)}
    if isinstance(o, RecuttingCards):
        cuts = " and ".join(
            f"{card} on {node} to {', '.join(words)}" for card, node, words in o.cuts
        )
        return {"cause": render(o.cause), "cuts": cuts}
    if isinstance(o, Defragmenting):
        return {"cause": render(o.cause), "jobs": list(o.jobs)}
    if isinstance(o, MovedToDefragment):
        return {"by": o.by}
    if isinstance(o, MovedToFaster):
        return {"model": o.model, "speedup": o.speedup, "gain_min": round(o.gain_s / 60)}
    if isinstance(o, Consolidating):
        return {"node": o.node, "cards": o.cards}
    if isinstance(o, ReservationAhead | ReservationClosed | PreemptedByReservation):
        return {f.name: getattr(o, f.name) for f in fields(o)}
    return _pod_fields(o)


def _pod_fields(o: Outcome) -> dict[str, object]:
    """:func:`_fields` for the extender's refusals of a pod."""
    if isinstance(o, ContainerDoesNotFit):
        reasons = o.why.reasons
        return {"container": o.container, "why": reasons[0].text if reasons else o.why.message}
    if isinstance(o, OnNode):
        return {"node": o.node, "cause": render(o.cause)}
    if isinstance(o, NamespaceQuota):
        unit = "MiB" if o.cores_per_card is None else f"({o.cores_per_card} a card)"
        return {
            "namespace": o.namespace,
            "resource": o.resource,
            "held": o.held,
            "limit": o.limit,
            "asked": o.asked,
            "unit": unit,
        }
    if isinstance(o, FieldNeverFits):
        return {"field": o.field, "detail": o.detail}
    if isinstance(o, GangTooFewFit):
        return {"key": o.key, "fit": o.fit, "size": o.size, "why": o.why.message}
    if isinstance(o, GangNoFreePlace):
        return {"key": o.key, "where": o.node or "these nodes"}
    if isinstance(o, GangPlaceElsewhere):
        return {"key": o.key, "node": o.node, "not_asked": f", not {o.asked}" if o.asked else ""}
    if isinstance(
        o,
        GangMemberDoesNotFit
        | GangReleased
        | GangNoPlaceForPod
        | GangConflict
        | GangSizeMismatch
        | GangOtherDevices
        | GangBindTimeout
        | GangMembersLate
        | GangAnnotationFailed,
    ):
        return {f.name: getattr(o, f.name) for f in fields(o)}
    return {}  # NoUsableFlavor, NotInPool: no fields
