"""Online defragmentation (issue 54 part 3): move running work so a pending job's shape fits.

A pool fragments over time: jobs end in the wrong order, and the free cards a large job needs lie
scattered over nodes, one or two here and there. No runtime moves a live job between cards, so a
*move* is: checkpoint, stop and requeue; the moved job waits again and the cycle places it anew.
:func:`plan_moves` finds, for a pending request that fits nowhere now, the fewest moves after
which it fits *and* every moved job fits again elsewhere (never on the cards freed for it: in the
what-if the pending job takes them first, and a front places it before the moved jobs run again,
as it does a preemptor). A plan that only fits by leaving a moved job without room is not a move
but a preemption, and is not made here.

Only *movable* work moves: a running job whose front says so (:class:`MoveFacts`; the timed
simulator names the tasks that checkpoint, by its checkpoint model; the server does not turn the
option on yet, and would name the jobs with a ``checkpoint_signal`` past their ``min_run_s``), and
only work of the pending job's priority or below (``eviction.may_move``). Moves are bounded by a
:class:`DisruptionBudget`: moves per tenant per hour, and GPU-hours lost per day (lost = the
card-seconds since each moved job's last checkpoint, as ``stop_cost.py`` counts them), kept by a
:class:`MoveLedger` the front writes when it carries a plan out.

The search reuses the preemption planner's machinery: candidate nodes are those where the pending
request fails for capacity alone and movable work sits (``preempt.candidate_nodes``), and every
trial is a what-if on the engine state (``engine/txn.py``), rolled back. It thinks in whole
cards: a card a replica takes whole is free only when every share on it has left, so the sets of
moves worth trying are those that free, on one candidate node, the cards one replica needs, a
card's shares moving together (``card_freeing.py``); every plan contains one. First the sets that
move only work off that node, fewest moves first, then least lost: the first that works is the
plan, unless a plan of fewer moves also moves work elsewhere (to make room for the moved), which
is looked for next, by size; among those of the fewest moves the one losing least wins (then the
lowest job ids). The search is exact up to ``max_trials`` what-ifs (and ``LOOK_PER_TRIAL`` times
as many sets looked at); past that it answers with the best plan found, or none. The bound:
with the defaults (:data:`MAX_MOVES` 16, :data:`MAX_TRIALS` 200) an 8-card node holding up to 16
movable tasks (two shares a card) is emptied for an 8-card job whenever it can be, as long as
the candidate nodes offer at most 200 such sets (one per node for a job taking every card of a
node, at most 70 per 8-card node for a smaller one), those of fewer moves first. Nothing here
does I/O or changes the state.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from xpupool.engine.cycle.card_freeing import freeing_sets
from xpupool.engine.cycle.eviction import may_move
from xpupool.engine.cycle.preempt import candidate_nodes
from xpupool.engine.cycle.work import PendingWork, RunningWork
from xpupool.engine.engine import Engine
from xpupool.engine.outcomes import Defragmenting, Refused
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation
from xpupool.model.request import WHOLE, Request

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
MAX_MOVES = 16
"""Moves one plan may make by default: an 8-card node of two shares a card."""
MAX_TRIALS = 200
"""What-ifs one search may run by default."""


H = TypeVar("H", bound=RunningWork)


@dataclass(frozen=True, slots=True)
class MoveFacts:
    """What a front knows of a movable running job: its ``tenant`` (for the budget), the
    ``request`` it is placed again with, and ``lost_card_s``, the work a move would lose now
    (cards x seconds since its last checkpoint)."""

    tenant: str
    request: Request
    lost_card_s: float


MovableFacts = Callable[[int], MoveFacts | None]
"""A front's answer for a running job, by job id: its facts when it may be moved, else None."""


@dataclass(frozen=True, slots=True)
class Movable:
    """A running job the planner may move, with its facts."""

    job: RunningWork
    facts: MoveFacts


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """At most ``moves_per_tenant_hour`` moves of one tenant's jobs in any hour, and at most
    ``lost_gpu_hours_day`` GPU-hours lost to moves in any day, pool-wide (None: no cap)."""

    moves_per_tenant_hour: int | None = 2
    lost_gpu_hours_day: float | None = 8.0

    def __post_init__(self) -> None:
        if self.moves_per_tenant_hour is not None and self.moves_per_tenant_hour < 0:
            raise ValueError("moves_per_tenant_hour must not be negative")
        if self.lost_gpu_hours_day is not None and not self.lost_gpu_hours_day >= 0:
            raise ValueError("lost_gpu_hours_day must not be negative")


@dataclass(frozen=True, slots=True)
class Allowance:
    """What the budget leaves now: moves per tenant (None: no cap) and card-seconds to lose."""

    moves_left: Mapping[str, int] | None
    per_tenant: int | None
    lost_card_s_left: float

    def moves_for(self, tenant: str) -> float:
        if self.per_tenant is None or self.moves_left is None:
            return math.inf
        return self.moves_left.get(tenant, self.per_tenant)

    def admits(self, moves: Sequence[Movable]) -> bool:
        """Whether carrying out ``moves`` stays within the budget."""
        if sum(m.facts.lost_card_s for m in moves) > self.lost_card_s_left:
            return False
        tenants = Counter(m.facts.tenant for m in moves)
        return all(count <= self.moves_for(t) for t, count in tenants.items())


class MoveLedger:
    """The moves carried out (time, tenant, card-seconds lost), for the budget's windows: a front
    :meth:`record`s each move it makes; :meth:`allowance` says what is left at a time."""

    def __init__(self, budget: DisruptionBudget) -> None:
        self.budget = budget
        self._moves: deque[tuple[float, str, float]] = deque()

    def record(self, at: float, tenant: str, lost_card_s: float) -> None:
        self._moves.append((at, tenant, max(0.0, lost_card_s)))

    def allowance(self, now: float) -> Allowance:
        while self._moves and self._moves[0][0] <= now - DAY_S:
            self._moves.popleft()  # older than a day: counts in neither window
        b = self.budget
        lost = sum(card_s for _, _, card_s in self._moves)
        lost_left = (
            math.inf if b.lost_gpu_hours_day is None else b.lost_gpu_hours_day * HOUR_S - lost
        )
        left: dict[str, int] | None = None
        if b.moves_per_tenant_hour is not None:
            recent = Counter(t for at, t, _ in self._moves if at > now - HOUR_S)
            left = {t: max(0, b.moves_per_tenant_hour - n) for t, n in recent.items()}
        return Allowance(left, b.moves_per_tenant_hour, lost_left)


@dataclass(frozen=True, slots=True)
class MovePlan:
    """Move ``moves`` (fewest first, then least lost): the pending request then fits on the
    cards ``frees`` names (its what-if placement) and each moved job fits again elsewhere.
    ``trials``: what-ifs the search ran."""

    moves: tuple[Movable, ...]
    lost_card_s: float
    frees: tuple[Allocation, ...]
    trials: int

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple(m.job.id for m in self.moves)


def refits_after(
    engine: Engine, req: Request, moves: Sequence[Movable]
) -> tuple[Allocation, ...] | None:
    """The what-if of one plan: release every allocation of ``moves``, place ``req``, then each
    moved job's request (most cards first). ``req``'s allocations when all of it fits, else None.
    The state is left as it was."""
    return _what_if(engine, req, moves)[1]


def _what_if(
    engine: Engine, req: Request, moves: Sequence[Movable]
) -> tuple[bool, tuple[Allocation, ...] | None]:
    """:func:`refits_after`, and whether ``req`` itself was placed (else no moved job was)."""
    state = engine.state
    with Transaction(state) as trial:  # rolled back on leaving
        for m in moves:
            for alloc in m.job.allocations:
                if alloc.id in state.live:
                    trial.release(alloc.id)
        placed = engine.place(req, txn=trial)
        if not placed.ok:
            return False, None
        for m in sorted(moves, key=lambda m: (-_cards(m.facts.request), m.job.id)):
            if not engine.place(m.facts.request, txn=trial).ok:
                return True, None
        return True, tuple(placed.allocations)


def plan_moves(
    engine: Engine,
    req: Request,
    movable: Sequence[Movable],
    allowance: Allowance | None = None,
    *,
    max_moves: int = MAX_MOVES,
    max_trials: int = MAX_TRIALS,
) -> MovePlan | None:
    """The fewest moves of ``movable`` work after which ``req`` fits and the moved jobs fit again,
    within ``allowance``; None when ``req`` fits already, or no plan of at most ``max_moves``
    moves works within the budget (see the module docstring). A what-if: the state is unchanged."""
    state = engine.state
    movable = [m for m in movable if any(a.id in state.live for a in m.job.allocations)]
    if allowance is not None:
        movable = [m for m in movable if allowance.admits((m,))]
    if not movable:
        return None
    owner = {a.id: m for m in movable for a in m.job.allocations}
    nodes = candidate_nodes(engine, req, lambda a: a.id in owner)
    if not nodes:
        return None
    # the cheapest first, so that the first plans tried are the likeliest best
    movable = sorted(movable, key=lambda m: (m.facts.lost_card_s, m.job.id))
    by_id = {m.job.id: m for m in movable}
    holders = {m.job.id: m.job.allocations for m in movable}
    parts: dict[frozenset[int], float] = {}  # sets that free one candidate node's cards: lost
    nodes_of: dict[frozenset[int], set[int]] = {}  # the nodes each frees
    for node in nodes:
        for part in freeing_sets(engine.state, req.devices, node, holders, max_moves):
            parts[part] = sum(by_id[j].facts.lost_card_s for j in part)
            nodes_of.setdefault(part, set()).add(node)
    if not parts or _fits_now(engine, req):
        return None
    search = _Search(engine, req, allowance, max_trials)
    # 1. a set that only moves work off the node it frees, fewest moves first, then least lost:
    # the first that works is the best of them
    plan: MovePlan | None = None
    for part in sorted(parts, key=lambda p: (len(p), parts[p], sorted(p))):
        if search.spent:
            return None  # the budget ran out before any plan of these
        plan = search.trial(tuple(by_id[j] for j in sorted(part)))
        if plan is not None:
            break
    # 2. fewer moves by also moving work elsewhere, to make room for the moved. A set whose
    # release let the request land nowhere gains nothing from moves off its node: one replica
    # lands on one node, whose state only moves there change
    fewer = max_moves if plan is None else len(plan.moves) - 1
    by_size = sorted(parts, key=lambda p: (-len(p), parts[p], sorted(p)))
    touch = {p: nodes_of[p] for p in search.unplaced} if req.replicas == 1 else {}
    for size in range(2, fewer + 1):
        best: MovePlan | None = None
        for combo in _with_extras(by_size, movable, size, set(parts), touch):
            if search.spent:
                break
            tried = search.trial(tuple(sorted(combo, key=lambda m: m.job.id)))
            if tried is not None and (best is None or _better(tried, best)):
                best = tried
        if best is not None:
            return search.done(best)
        if search.spent:
            break
    return None if plan is None else search.done(plan)


LOOK_PER_TRIAL = 50
"""Sets of moves the search may look at (and pass over) per what-if it may run."""


class _Search:
    """The what-ifs of one :func:`plan_moves` call, within its budget."""

    def __init__(
        self, engine: Engine, req: Request, allowance: Allowance | None, max_trials: int
    ) -> None:
        self.engine = engine
        self.req = req
        self.allowance = allowance
        self.max_trials = max_trials
        self.trials = 0
        self.looked = 0
        self.unplaced: set[frozenset[int]] = set()  # sets after which the request fit nowhere

    @property
    def spent(self) -> bool:
        return self.trials >= self.max_trials or self.looked >= LOOK_PER_TRIAL * self.max_trials

    def trial(self, moves: tuple[Movable, ...]) -> MovePlan | None:
        """The plan ``moves`` make, when the budget allows them and the request and every
        moved job then fit; None otherwise."""
        self.looked += 1
        if self.allowance is not None and not self.allowance.admits(moves):
            return None
        self.trials += 1
        placed, frees = _what_if(self.engine, self.req, moves)
        if not placed:
            self.unplaced.add(frozenset(m.job.id for m in moves))
        if frees is None:
            return None
        return MovePlan(moves, sum(m.facts.lost_card_s for m in moves), frees, 0)

    def done(self, plan: MovePlan) -> MovePlan:
        return MovePlan(plan.moves, plan.lost_card_s, plan.frees, self.trials)


def _better(a: MovePlan, b: MovePlan) -> bool:
    """Of two plans of as many moves, ``a`` loses less (then moves lower job ids)."""
    return (a.lost_card_s, a.job_ids) < (b.lost_card_s, b.job_ids)


def _fits_now(engine: Engine, req: Request) -> bool:
    with Transaction(engine.state) as trial:  # rolled back on leaving
        return engine.place(req, txn=trial).ok


def _with_extras(
    parts: Sequence[frozenset[int]],
    movable: Sequence[Movable],
    size: int,
    seen: set[frozenset[int]],
    touch: Mapping[frozenset[int], set[int]],
) -> Iterator[tuple[Movable, ...]]:
    """Every set of ``size`` moves holding one of ``parts`` (sets freeing a candidate node's
    cards) and other moves anywhere, each once and none of ``seen``; a part in ``touch`` only
    with one move more on one of the nodes it names. More of the set on the node first
    (``parts`` largest first), the rest cheapest first."""
    by_id = {m.job.id: m for m in movable}
    for part in parts:
        if len(part) >= size:
            continue
        rest = [m for m in movable if m.job.id not in part]
        on_node = tuple(by_id[j] for j in sorted(part))
        firsts: list[Movable | None] = [None]
        if part in touch:
            nodes = touch[part]
            firsts = [m for m in rest if any(a.node_index in nodes for a in m.job.allocations)]
        for first in firsts:
            more = size - len(part) - (first is not None)
            pool = [m for m in rest if m is not first]
            for others in itertools.combinations(pool, more):
                extra = others if first is None else (first, *others)
                key = part | {m.job.id for m in extra}
                if key not in seen:
                    seen.add(key)
                    yield on_node + extra


def _cards(req: Request) -> int:
    """Thousandths of a card ``req`` asks in all (a request of memory only: a card each)."""
    return req.replicas * req.devices.count * (req.devices.need_core_permille or WHOLE)


class Defrag:
    """The cycle's defragmentation option: which running jobs may move (``facts``, from the
    front), the budget's :attr:`ledger` (the front records each move it carries out) and the
    clock the budget's windows run on."""

    def __init__(
        self,
        facts: MovableFacts,
        clock: Callable[[], float],
        budget: DisruptionBudget | None = None,
        *,
        min_cards: float = 0.0,
        max_moves: int = MAX_MOVES,
        max_trials: int = MAX_TRIALS,
    ) -> None:
        """``min_cards``: only for jobs asking at least that many cards in all (a share of a card
        counts as its part of one), as a front keeps it to the large shapes."""
        self.facts = facts
        self.clock = clock
        self.ledger = MoveLedger(budget or DisruptionBudget())
        self.min_cards = min_cards
        self.max_moves = max_moves
        self.max_trials = max_trials

    def movable(self, job: PendingWork, running: Mapping[int, RunningWork]) -> list[Movable]:
        """The running jobs that may move for ``job``: not stopping, of its priority or below,
        and movable by their front."""
        out: list[Movable] = []
        for holder in running.values():
            if holder.id == job.id or not may_move(
                holder.priority, job.priority, leaving=bool(holder.stopping)
            ):
                continue
            facts = self.facts(holder.id)
            if facts is not None:
                out.append(Movable(holder, facts))
        return out

    def plan(
        self, engine: Engine, job: PendingWork, running: Mapping[int, RunningWork]
    ) -> MovePlan | None:
        """The plan for ``job`` now, within what the budget leaves (see :func:`plan_moves`)."""
        if _cards(job.request) < self.min_cards * WHOLE:
            return None
        return plan_moves(
            engine,
            job.request,
            self.movable(job, running),
            self.ledger.allowance(self.clock()),
            max_moves=self.max_moves,
            max_trials=self.max_trials,
        )

    def moves_for(
        self, engine: Engine, job: PendingWork, running: Mapping[int, H], cause: Refused
    ) -> tuple[Defragmenting, tuple[H, ...]] | None:
        """For the cycle: ``job``'s wait while its moves are carried out, and the jobs to move."""
        plan = self.plan(engine, job, running)
        if plan is None:
            return None
        return Defragmenting(cause, plan.job_ids), tuple(running[i] for i in plan.job_ids)
