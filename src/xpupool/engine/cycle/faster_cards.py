"""Moving long jobs to faster cards as they free up (issue 55): the part of Gavel's re-planning
that shortens completion, as one rule of the one cycle.

A scheduler that places each job once leaves a job that arrived while only slow cards were free
on them for its whole run, even when faster cards free up an hour later. Gavel (OSDI 2020)
re-plans every round and moves jobs onto the cards that free up. This rule does that where it
pays: after a front's pass has tried every pending job (so the free cards are ones none of them
could take), a running job that states its speeds (``Request.speeds``) is moved to free faster
cards when its remaining work would end sooner there by at least :attr:`FasterRule.min_speedup`
times *and* :attr:`FasterRule.min_gain_s` seconds, counting what a move costs: the work done since
its last checkpoint is redone (``stop_cost.py``'s ``lost_s``) at the new speed, after a restart of
:attr:`FasterRule.restart_s`. A move is one step on the engine: the job is admitted again (its
queue's quota counted) pinned to the free cards of a what-if placement, then its old cards are
released, so nothing else can take the new ones in between and a move its quota refuses changes
nothing; the front then checkpoints, stops and restarts it there (the timed simulator at once; the
server through its one preemption path, the new cards kept for it meanwhile:
``server/plane/faster_moves.py``). Jobs that gain most are moved first; each call makes at most
:attr:`FasterRule.max_moves` moves and :attr:`FasterRule.max_trials` what-ifs, so a pass over
hundreds of running jobs stays cheap. Nothing is moved when no faster card is free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from xpupool.engine.cycle.admission import Admission, Admitted
from xpupool.engine.cycle.work import RunningWork
from xpupool.engine.outcomes import MovedToFaster
from xpupool.engine.scorers.throughput import relative_speeds
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation
from xpupool.model.request import Request, fields_but
from xpupool.model.speeds import Speeds

# every field of a request but its name: two requests alike in these fit alike
_SHAPE = fields_but("name")


@dataclass(frozen=True, slots=True)
class FasterRule:
    """When a move pays: the remaining run on the current cards is at least ``min_speedup``
    times, and ``min_gain_s`` seconds longer than, the run on the new cards (the work lost since
    the last checkpoint redone, plus ``restart_s``). ``max_moves``/``max_trials``: moves and
    what-if placements per call, at most."""

    min_speedup: float = 1.5
    min_gain_s: float = 1800.0
    restart_s: float = 0.0
    max_moves: int = 16
    max_trials: int = 64

    def __post_init__(self) -> None:
        if not self.min_speedup > 1.0:
            raise ValueError("min_speedup must be above 1 (a move must make the job faster)")
        if not self.min_gain_s >= 0.0:
            raise ValueError("min_gain_s must not be negative")
        if not self.restart_s >= 0.0:
            raise ValueError("restart_s must not be negative")
        if self.max_moves < 1 or self.max_trials < 1:
            raise ValueError("max_moves and max_trials must be at least 1")

    def new_run_s(self, remaining_s: float, lost_s: float, speedup: float) -> float:
        """Seconds until the job ends if moved now to cards ``speedup`` times as fast."""
        return (remaining_s + lost_s) / speedup + self.restart_s

    def pays(self, remaining_s: float, new_run_s: float) -> bool:
        return (
            remaining_s >= self.min_speedup * new_run_s
            and remaining_s - new_run_s >= self.min_gain_s
        )

    def speedup_needed(self, remaining_s: float, lost_s: float) -> float:
        """The least speedup at which a move pays (inf: none does)."""
        budget = min(remaining_s / self.min_speedup, remaining_s - self.min_gain_s)
        budget -= self.restart_s
        if budget <= 0.0:
            return float("inf")
        return (remaining_s + lost_s) / budget


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a front knows of a running job that may move: its ``queue`` and ``request`` (it is
    admitted again with them), ``remaining_s`` (seconds left at its current cards' speed) and
    ``lost_s`` (seconds of that speed's work a stop now loses: since its last checkpoint)."""

    queue: str
    request: Request
    remaining_s: float
    lost_s: float


RunningFacts = Callable[[int], RunFacts | None]
"""A front's answer for a running job, by id: its facts when it may move, else None."""


@dataclass(frozen=True, slots=True)
class FasterMove:
    """Job ``job`` was moved: ``old`` released, ``admitted`` holds its new cards (committed).
    ``outcome`` says why, for its event; ``lost_s`` is the work the stop lost (per card)."""

    job: RunningWork
    old: tuple[Allocation, ...]
    admitted: Admitted
    outcome: MovedToFaster
    lost_s: float


class FasterCards:
    """The cycle's move-to-faster option: ``facts`` from the front, and the :class:`FasterRule`."""

    def __init__(self, facts: RunningFacts, rule: FasterRule | None = None) -> None:
        self.facts = facts
        self.rule = rule or FasterRule()
        self._rel: dict[Speeds, FloatArray] = {}
        self._rel_state: ClusterState | None = None
        # per running job: (its first allocation's id, its request, its relative speed there,
        # its speeds and need per card), so that a call asks the front's facts only of jobs a
        # free card could speed up enough
        self._known: dict[int, tuple[int, Request, float, tuple[Speeds, int]]] = {}
        self._seen_at = (-1, -1)  # (inventory epoch, releases) at the end of the last call

    def moves(self, admission: Admission, running: Mapping[int, RunningWork]) -> list[FasterMove]:
        """Move the running jobs that gain enough onto free faster cards, most gain first; each
        move is committed (see the module docstring). Call it after a pass that tried every
        pending job. Nothing is tried when no card was released (nor the inventory changed)
        since the last call: cards that were free then were weighed then. Deterministic for a
        given state and history of calls."""
        state = admission.engine.state
        if (state.epoch, admission.released) == self._seen_at:
            return []
        moved = self._moves(admission, running)
        self._seen_at = (state.epoch, admission.released)
        return moved

    def _moves(self, admission: Admission, running: Mapping[int, RunningWork]) -> list[FasterMove]:
        state = admission.engine.state
        if self._rel_state is not state:
            self._rel.clear()
            self._known.clear()
            self._rel_state = state
        rule = self.rule
        free: dict[int, IntArray] = {}  # model ids with a card free enough, per need (permille)
        best_of: dict[tuple[Speeds, int], float] = {}  # the best of those, per speeds and need
        known, self._known = self._known, {}
        ranked: list[tuple[float, int, RunningWork, RunFacts, float]] = []
        for job in running.values():
            if job.stopping or not job.allocations:
                continue
            first = job.allocations[0].id
            seen = known.get(job.id)
            facts: RunFacts | None = None
            if seen is None or seen[0] != first:  # a job not seen on these cards yet
                facts = self.facts(job.id)
                if facts is None or not facts.request.speeds:
                    continue
                req = facts.request
                rel = self._relative(req.speeds, state)
                key = (req.speeds, req.devices.need_core_permille)
                seen = (first, req, _speed_of(job.allocations, rel, state), key)
            self._known[job.id] = seen
            _, req, now, key = seen
            best = best_of.get(key)
            if best is None:
                rel = self._relative(req.speeds, state)
                best = best_of[key] = _best_free(rel, req, state, free)
            if now <= 0.0 or best < rule.min_speedup * now:
                continue  # no free card makes it fast enough, whatever it has left
            facts = facts or self.facts(job.id)
            if facts is None or facts.remaining_s <= 0:
                continue
            new_s = rule.new_run_s(facts.remaining_s, facts.lost_s, best / now)
            if rule.pays(facts.remaining_s, new_s):
                ranked.append((-(facts.remaining_s - new_s), job.id, job, facts, now))
        ranked.sort(key=lambda r: (r[0], r[1]))
        moved: list[FasterMove] = []
        trials = 0
        free.clear()
        no_room: set[tuple[tuple[object, ...], bytes]] = set()  # shapes and models that fit nowhere
        for _, _, job, facts, now in ranked:
            if len(moved) >= rule.max_moves or trials >= rule.max_trials:
                break
            rel = self._relative(facts.request.speeds, state)
            needed = rule.speedup_needed(facts.remaining_s, facts.lost_s) * now
            if _best_free(rel, facts.request, state, free) < needed:
                continue  # the faster cards it could use went to a job moved before it
            fast = rel >= needed - 1e-12
            tried = (_SHAPE(facts.request), fast.tobytes())
            if tried in no_room:
                continue  # a job of its shape found no room on these models in this call
            trials += 1
            target = _what_if(admission, facts.request, fast)
            if target is None:
                no_room.add(tried)
                continue
            speedup = _speed_of(list(target), rel, state) / now
            new_s = rule.new_run_s(facts.remaining_s, facts.lost_s, speedup)
            if not rule.pays(facts.remaining_s, new_s):
                continue
            old = tuple(job.allocations)
            admitted = move_pinned(admission, facts, target, old)
            if admitted is None:
                continue
            free.clear()  # the state changed
            no_room.clear()
            model = state.models[_slowest_model(admitted.placement.allocations, rel, state)]
            outcome = MovedToFaster(model[1], round(speedup, 2), round(facts.remaining_s - new_s))
            moved.append(FasterMove(job, old, admitted, outcome, facts.lost_s))
        return moved

    def _relative(self, speeds: Speeds, state: ClusterState) -> FloatArray:
        found = self._rel.get(speeds)
        if found is None:
            found = self._rel[speeds] = relative_speeds(speeds, state)
        return found


def _speed_of(allocations: list[Allocation], rel: FloatArray, state: ClusterState) -> float:
    """The job's relative speed on ``allocations``: its slowest card's (0.0: no card)."""
    models = state.dev_model.reshape(-1)
    speeds = [float(rel[models[d.slot]]) for a in allocations for d in a.devices]
    return min(speeds, default=0.0)


def _slowest_model(
    allocations: tuple[Allocation, ...], rel: FloatArray, state: ClusterState
) -> int:
    models = state.dev_model.reshape(-1)
    ids = [int(models[d.slot]) for a in allocations for d in a.devices]
    return min(ids, key=lambda m: (float(rel[m]), m))


def _best_free(
    rel: FloatArray, req: Request, state: ClusterState, free: dict[int, IntArray]
) -> float:
    """The highest relative speed among the models with a usable card free enough for one of
    ``req``'s devices (0.0: none): a bound on what a move could reach, before any what-if.
    ``free`` keeps those models per need while the state stays as it is."""
    need = req.devices.need_core_permille
    models = free.get(need)
    if models is None:
        mask = state.dev_usable & (state.dev_model >= 0) & (state.dev_core_free >= need)
        models = free[need] = np.unique(state.dev_model[mask])
    return float(rel[models].max()) if models.size else 0.0


def _what_if(
    admission: Admission, req: Request, fast_models: BoolArray
) -> tuple[Allocation, ...] | None:
    """Where ``req`` would go on free cards of ``fast_models`` (a mask over model ids) only;
    None when it fits there nowhere. Rolled back: changes nothing."""
    engine = admission.engine
    state = engine.state
    within = (state.dev_model >= 0) & fast_models[np.maximum(state.dev_model, 0)]
    with Transaction(state) as trial:  # rolled back on leaving
        placed = engine.place(req, within=within, txn=trial)
        return tuple(placed.allocations) if placed.ok else None


def move_pinned(
    admission: Admission,
    facts: RunFacts,
    target: tuple[Allocation, ...],
    old: tuple[Allocation, ...],
) -> Admitted | None:
    """Admit the job's request pinned to ``target``'s cards, then release its ``old`` ones;
    None, with nothing changed, when its queue refuses (its quota counts both for the moment).
    The one way a move is committed in the cycle: moves to faster cards and consolidation."""
    outcome = admission.admit(_pinned(facts.request, target), facts.queue)
    if not isinstance(outcome, Admitted):
        return None
    if not outcome.placement.ok:  # some replicas placed, not all: the job moves whole or not
        for alloc in outcome.placement.allocations:
            admission.release(alloc.id)
        return None
    for alloc in old:
        admission.release(alloc.id)
    return outcome


def _pinned(req: Request, allocations: tuple[Allocation, ...]) -> Request:
    """``req`` restricted to the cards of ``allocations``."""
    uuids = tuple(dict.fromkeys(u for a in allocations for u in a.device_uuids))
    return replace(req, devices=replace(req.devices, uuids=uuids))
