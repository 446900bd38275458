"""Consolidation in quiet periods (issue 54 part 3): free whole cards and nodes *before* a large
job asks, for the large shapes the learned workload expects.

Online defragmentation (``defrag.py``) moves work only once a large job waits; by then the pool
is often full and the moved work finds no room. When nothing has waited for
:attr:`ConsolidationRule.quiet_s` seconds, this step takes the largest whole-card shape of the
expected workload (the engine's target workload, given or learned from the requests, or the one a
front names) that fits nowhere now, and asks the defragmentation planner
(:func:`defrag.plan_moves`: the fewest moves of movable work, within the disruption budget, after
which the shape fits and every moved job fits again elsewhere) for at most
:attr:`ConsolidationRule.max_moves` moves. The what-if is then replayed with the shape holding the
freed cards, so the moved jobs land on nodes already in use and not back on those cards, and the
plan is kept only when the fragmentation measure of that workload (FGD's expected stranded
compute, ``fragmentation/measure.py``) summed over the pool falls: a move never strands more than
it frees. A kept move is one step on the engine, as a move to faster cards is
(``faster_cards.py``): the job is admitted again pinned to the cards of the what-if, its old ones
released, the move recorded in the budget's ledger; the front then checkpoints, stops and
restarts it there. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from xpupool.engine.cycle.admission import Admission, Admitted
from xpupool.engine.cycle.defrag import Defrag, Movable, plan_moves
from xpupool.engine.cycle.faster_cards import RunFacts, move_pinned
from xpupool.engine.cycle.work import RunningWork
from xpupool.engine.engine import Engine
from xpupool.engine.fragmentation.measure import TargetWorkload, fragmentation
from xpupool.engine.outcomes import Consolidating
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation
from xpupool.model.request import WHOLE, Request


@dataclass(frozen=True, slots=True)
class ConsolidationRule:
    """Consolidate when no job has waited for ``quiet_s`` seconds, for the workload's shapes of
    at least ``min_cards`` whole cards; at most ``max_moves`` moves and ``max_trials`` what-ifs
    a call, and one search every ``every_s`` seconds (a front calls after every pass: a search
    that found nothing is not run again at once)."""

    quiet_s: float = 600.0
    every_s: float = 60.0
    min_cards: int = 4
    max_moves: int = 3
    max_trials: int = 50

    def __post_init__(self) -> None:
        if not self.quiet_s >= 0 or not self.every_s >= 0:
            raise ValueError("quiet_s and every_s must not be negative")
        if self.min_cards < 1 or self.max_moves < 1 or self.max_trials < 1:
            raise ValueError("min_cards, max_moves and max_trials must be at least 1")


@dataclass(frozen=True, slots=True)
class ConsolidationMove:
    """``job`` moved from ``old`` to ``admitted``'s cards (committed), for ``outcome``; it loses
    ``lost_card_s`` (cards x seconds since its last checkpoint)."""

    job: RunningWork
    old: tuple[Allocation, ...]
    admitted: Admitted
    outcome: Consolidating
    lost_card_s: float


class Consolidation:
    """The cycle's consolidation option, on the defragmentation's movable work and budget."""

    def __init__(
        self,
        defrag: Defrag,
        rule: ConsolidationRule | None = None,
        expected: Callable[[], TargetWorkload | None] | None = None,
    ) -> None:
        """``expected``: the workload whose large shapes to free cards for, and whose
        fragmentation must fall (default: the engine's target workload at each call). A front
        whose target workload covers only the common shapes (FGD's 95 %, where a rare 8-card
        shape falls out) passes the shapes it has seen in full, as the timed simulator does."""
        self.defrag = defrag
        self.rule = rule or ConsolidationRule()
        self.expected = expected
        self._busy_at: float | None = None  # when a job last waited (None: never)
        self._searched_at: float | None = None  # when a search last ran (None: never)

    def quiet(self, waiting: bool) -> bool:
        """Whether the pool is quiet now: no job waiting, and none for :attr:`quiet_s` seconds.
        ``waiting``: whether a job waits now (the front's pending jobs after its pass)."""
        now = self.defrag.clock()
        if waiting:
            self._busy_at = now
        return not waiting and (self._busy_at is None or now - self._busy_at >= self.rule.quiet_s)

    def moves(
        self, admission: Admission, running: Mapping[int, RunningWork], waiting: bool
    ) -> list[ConsolidationMove]:
        """When quiet, the moves that free cards for the largest expected shape that fits nowhere
        now (committed; see the module docstring); else, or when none improves the
        fragmentation measure within the budget, none."""
        if not self.quiet(waiting):
            return []
        now = self.defrag.clock()
        if self._searched_at is not None and now - self._searched_at < self.rule.every_s:
            return []
        self._searched_at = now
        engine = admission.engine
        workload = engine.target_workload() if self.expected is None else self.expected()
        shape = _target_shape(engine, workload, self.rule.min_cards)
        if shape is None:
            return []
        movable = []
        for job in running.values():
            facts = None if job.stopping else self.defrag.facts(job.id)
            if facts is not None:
                movable.append(Movable(job, facts))
        plan = plan_moves(
            engine,
            shape,
            movable,
            self.defrag.ledger.allowance(self.defrag.clock()),
            max_moves=self.rule.max_moves,
            max_trials=self.rule.max_trials,
        )
        if plan is None:
            return []
        assert workload is not None
        targets = _improving(engine, workload, shape, plan.moves, plan.frees)
        if targets is None:
            return []
        node = plan.frees[0].node
        outcome = Consolidating(node, shape.devices.count)
        return _carry_out(admission, plan.moves, targets, outcome, self.defrag)


def _target_shape(
    engine: Engine, workload: TargetWorkload | None, min_cards: int
) -> Request | None:
    """The largest whole-card shape of ``workload`` of at least ``min_cards`` cards that fits
    nowhere now (None: none; the largest first, so a pool with room for it needs nothing)."""
    if workload is None:
        return None
    large = sorted(
        (
            s
            for s in workload.shapes
            if s.replicas == 1
            and s.devices.count >= min_cards
            and s.devices.need_core_permille >= WHOLE
        ),
        key=lambda s: -s.devices.count,
    )
    for shape in large:
        with Transaction(engine.state) as trial:  # rolled back on leaving
            if engine.place(shape, txn=trial).ok:
                return None  # room for the largest expected shape already
        return shape
    return None


def _improving(
    engine: Engine,
    workload: TargetWorkload,
    shape: Request,
    moves: tuple[Movable, ...],
    frees: tuple[Allocation, ...],
) -> dict[int, tuple[Allocation, ...]] | None:
    """Where each of ``moves`` goes (job id: its what-if allocations) when the moved jobs are
    placed with ``shape`` holding the cards ``frees`` names, and the pool's fragmentation of
    ``workload`` is then lower than now; None otherwise. Rolled back: changes nothing."""
    state = engine.state
    table = engine.shape_table(workload)
    nodes = np.arange(state.n_nodes, dtype=np.intp)
    before = float(fragmentation(state, table, nodes).sum())
    targets: dict[int, tuple[Allocation, ...]] = {}
    held = {d.slot for a in frees for d in a.devices}
    with Transaction(state) as trial:  # rolled back on leaving
        for m in moves:
            for alloc in m.job.allocations:
                if alloc.id in state.live:
                    trial.release(alloc.id)
        placed = engine.place(shape, txn=trial)
        if not placed.ok or {d.slot for a in placed.allocations for d in a.devices} != held:
            return None
        for m in sorted(moves, key=lambda m: (-m.facts.request.devices.count, m.job.id)):
            again = engine.place(m.facts.request, txn=trial)
            if not again.ok:
                return None
            targets[m.job.id] = tuple(again.allocations)
        for alloc in placed.allocations:
            trial.release(alloc.id)
        after = float(fragmentation(state, table, nodes).sum())
    return targets if after < before else None


def _carry_out(
    admission: Admission,
    moves: tuple[Movable, ...],
    targets: Mapping[int, tuple[Allocation, ...]],
    outcome: Consolidating,
    defrag: Defrag,
) -> list[ConsolidationMove]:
    """Move each job to its target cards (admitted pinned there, then its old cards released),
    recording each in the ledger; a move whose cards another moved job still holds waits for
    that one, and one that cannot be made is left out (nothing changed for it)."""
    done: list[ConsolidationMove] = []
    left = list(moves)
    now = defrag.clock()
    progress = True
    while left and progress:
        progress = False
        for m in list(left):
            old = tuple(m.job.allocations)
            queue = admission.queue_of(old[0].id)
            if queue is None:  # not admitted through this cycle: not moved
                left.remove(m)
                continue
            facts = RunFacts(queue, m.facts.request, 0.0, 0.0)
            admitted = move_pinned(admission, facts, targets[m.job.id], old)
            if admitted is None:
                continue
            left.remove(m)
            progress = True
            defrag.ledger.record(now, m.facts.tenant, m.facts.lost_card_s)
            done.append(ConsolidationMove(m.job, old, admitted, outcome, m.facts.lost_card_s))
    return done
