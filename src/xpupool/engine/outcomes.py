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

from dataclasses import dataclass
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


WaitCause = Refused | Inadmissible | NeverFits | WaitingForVictims | CannotSchedule


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


PreemptCause = PreemptingLowerPriority | Reclaiming


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


Preempted = PreemptedByPriority | PreemptedByReclaim


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

Outcome = FlavorCause | WaitCause | PreemptCause | Preempted | PodRefusal


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
    return {}  # NoUsableFlavor, NotInPool: no fields
