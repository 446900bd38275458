"""QoS classes: what a job's class means for its priority, its preemption and the cards it may use.

Issue 54, part 5. The one mapping from a class to those three, read by the request model (the
priority a best-effort job gets when it names none), the submission edge (``preemptible`` with
``guaranteed`` is refused), the scheduling cycle (a guaranteed job is never a preemption victim)
and the engine's fit (a guaranteed share never rides on the over-committed part of a card,
``engine/physical_room.py``). Kubernetes' pod QoS classes are about CPU and memory requests and
limits and decide eviction under node pressure; these are about cards (docs/jobs.md, QoS classes).
The simulator's Alibaba trace carries its own QoS column (LS, Burstable, BE: ``sim/queue_config.py``)
that it turns into queue priorities only; LS corresponds to guaranteed, BE to best-effort.
"""

from __future__ import annotations

from enum import StrEnum

from xpupool.model.errors import RequestError


class QoS(StrEnum):
    """A job's class. ``burstable`` is the default because it is what every job was before
    classes existed: its own priority, preemptible by higher priority, allowed on over-committed
    cards; a default of ``guaranteed`` would have changed where existing jobs may run."""

    GUARANTEED = "guaranteed"  # never preempted; shares only within a card's physical capacity
    BURSTABLE = "burstable"  # as a job without a class: its priority, any committable capacity
    BEST_EFFORT = "best-effort"  # preemptible; lowest priority unless it names one


DEFAULT_QOS = QoS.BURSTABLE
_BY_NAME = {q.value: q for q in QoS}
QOS_NAMES = frozenset(_BY_NAME)

BEST_EFFORT_PRIORITY = -(1 << 31)
"""A best-effort job's priority when it names none: the lowest a request may have, so that it
is below every other job of its queue and the first that priority preemption takes."""


def parse_qos(path: str, value: object) -> QoS:
    """``guaranteed``, ``burstable`` or ``best-effort``, else a RequestError on ``path``."""
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    known = ", ".join(q.value for q in QoS)
    raise RequestError(path, value, f"unknown QoS class; known: {known}")


def default_priority(qos: QoS, given: int | None) -> int:
    """The job's priority: ``given`` when it names one; else best-effort's lowest, or 0."""
    if given is not None:
        return given
    return BEST_EFFORT_PRIORITY if qos is QoS.BEST_EFFORT else 0


def may_lower_priority(qos: QoS) -> bool:
    """May the plane lower the job's priority (a tenant over its budget, usage/billing.py)?
    Not a guaranteed job's: its class promises the priority it was admitted with."""
    return qos is not QoS.GUARANTEED


def may_be_preempted(qos: QoS) -> bool:
    """May priority preemption take the job? Never a guaranteed one."""
    return qos is not QoS.GUARANTEED


def check_preemptible(qos: QoS, preemptible: bool) -> None:
    """A job that says it may be preempted (``preemptible``, to borrow reserved cards) cannot be
    guaranteed; raises a RequestError naming both fields."""
    if preemptible and qos is QoS.GUARANTEED:
        raise RequestError(
            "preemptible",
            preemptible,
            "a job of qos 'guaranteed' is never preempted: give qos 'burstable' or "
            "'best-effort', or leave preemptible false",
        )


def physical_only(qos: QoS) -> bool:
    """Must the job's card shares stay within each card's physical capacity (no over-commit)?"""
    return qos is QoS.GUARANTEED
