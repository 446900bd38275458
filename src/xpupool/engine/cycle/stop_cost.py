"""What stopping a running job now would cost, and whether it may be stopped yet.

Preempting a job throws away the work it did since its last checkpoint (all of its run when it
never reported one): the cards it holds times that time, in card-seconds. A job may also ask not
to be preempted before it has run ``min_run_s`` (it needs that long to reach its first useful
checkpoint), which only a queue with ``preempts_min_run`` overrides. The cycle asks a front for
these facts (:class:`StopCosts`) because only the front knows the clock and the checkpoints: the
server from the jobs' records and reports, the timed simulator from its checkpoint model. Without
them the planner chooses as it always did (priority, then fewest victims).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xpupool.model.allocation import Allocation


@dataclass(frozen=True, slots=True)
class StopCost:
    """A running job's exposure if it were stopped now.

    ``lost_s``: seconds of work lost, per card it holds (now minus its last checkpoint, or its
    run time when it reported none); ``checkpointed``: that time runs from a checkpoint (else
    from its start); ``protected``: it is still inside its minimum run time."""

    lost_s: float
    checkpointed: bool = False
    protected: bool = False


def stop_cost(
    now: float,
    started_at: float | None,
    checkpoint_at: float | None,
    min_run_s: float | None,
) -> StopCost:
    """The cost of stopping, at ``now``, a run that started at ``started_at`` (None: not started,
    so nothing is lost) and last checkpointed at ``checkpoint_at`` (None, or before its start:
    none in this run). One formula for every front, so the server and the simulator agree."""
    if started_at is None:
        return StopCost(0.0)
    ran = max(0.0, now - started_at)
    checkpointed = checkpoint_at is not None and checkpoint_at >= started_at
    lost = max(0.0, now - checkpoint_at) if checkpoint_at is not None and checkpointed else ran
    protected = min_run_s is not None and ran < min_run_s
    return StopCost(min(lost, ran), checkpointed, protected)


def cards_of(alloc: Allocation) -> float:
    """Cards an allocation holds: its compute shares in cards (a half card is 0.5), or its
    device count when it took memory only (no compute share to weigh it by)."""
    cores = sum(d.core_permille for d in alloc.devices)
    return cores / 1000 if cores else float(len(alloc.devices))


def lost_card_s(cost: StopCost, allocations: list[Allocation]) -> float:
    """Card-seconds a job loses if stopped now: its cards times :attr:`StopCost.lost_s`."""
    return cost.lost_s * sum(cards_of(a) for a in allocations)


def describe(cost: StopCost, card_s: float) -> str:
    """Why a victim was chosen, for its event: what it loses, and from when."""
    since = "since its checkpoint" if cost.checkpointed else "of run time (no checkpoint)"
    return f"lost {card_s / 60:.1f} card-min {since}"


StopCosts = Callable[[int], StopCost]
"""A front's answer for a running job, by job id (see the module docstring)."""
