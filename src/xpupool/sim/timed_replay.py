"""Replay a trace in time: tasks arrive at their creation time, run for their recorded duration once
placed, and wait in a queue while nothing fits.

The engine, the scheduling cycle and the retry gate are the server's own (``engine/cycle/``); this
loop only decides *when* to run a pass. After every arrival or departure the pending tasks the
retry gate lets in (new ones, and those that failed before the last release, at most
``RETRIES_PER_TENANT`` per tenant) are tried in the cycle's order (fair share between tenants,
then priority, then arrival), each admitted against its queue's quota, and a task refused for
capacity alone may preempt lower-priority tasks as the server would. A victim stops at once, loses
the progress since its last checkpoint (all of it without a checkpoint model, ``sim/checkpoints.py``),
keeps the rest and waits again with its original arrival; the work lost is counted in GPU-hours; with
``checkpoint_aware`` the planner prefers victims that lose least (``engine/cycle/stop_cost.py``),
else it chooses as the server always did. The pass is then run again at the same
instant, as it is when retries were left out while some task fitted. Retries left out by a pass
that placed nothing are tried ``PERIODIC_PASS_S`` later (the server's periodic pass) unless an
event comes first. Without a queue configuration every task goes to one queue
without quota or preemption, with priority 0 (``fifo``) or its QoS class (``priority``).
A task's duration is ``deletion - scheduled`` from the trace (``deletion - creation`` when it was
never scheduled there), see ``TraceTask.duration_s``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from xpupool.engine import ClusterState, Engine, Profile
from xpupool.engine.cycle import (
    Admission,
    Place,
    Preempt,
    SchedulingCycle,
    Shrink,
    Stopping,
    Wait,
    grow,
    release_extras,
)
from xpupool.engine.cycle.consolidate import Consolidation, ConsolidationRule
from xpupool.engine.cycle.defrag import Defrag, DisruptionBudget, MoveFacts
from xpupool.engine.cycle.fair_share import DecayedUsage
from xpupool.engine.cycle.faster_cards import FasterCards, FasterRule, RunFacts
from xpupool.engine.cycle.recutting import Recutting
from xpupool.engine.cycle.reservations import Reservations, Terms
from xpupool.engine.cycle.retry_gate import NEVER_TRIED, PERIODIC_PASS_S, RetryGate
from xpupool.engine.cycle.stop_cost import StopCost, stop_cost
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.engine.outcomes import ReservationAhead, ReservationClosed
from xpupool.model import Allocation, Node, Request
from xpupool.sim.alibaba import TraceTask, capacity_milli, to_request
from xpupool.sim.checkpoints import NEVER, CheckpointModel, saved_s
from xpupool.sim.elastic_tasks import CARD_MILLI, ElasticTasks
from xpupool.sim.queue_config import QueueConfig
from xpupool.sim.reservation_plan import ReservationPlan
from xpupool.sim.site_dispatch import Dispatch
from xpupool.sim.task_speeds import TaskSpeeds

if TYPE_CHECKING:
    from xpupool.sim.partition_timed import TimedPartitions


class QueueOrder(StrEnum):
    FIFO = "fifo"
    PRIORITY = "priority"


@dataclass(frozen=True, slots=True)
class TimedResult:
    """Per task: wait (s) and completion time (s), NaN when never placed; utilisation as a step
    function over event times (GPU % allocated from ``times[i]`` until ``times[i + 1]``).
    ``last_arrival`` ends the window the mean utilisation is taken over: after it only the long
    tail of the longest tasks remains, which says nothing about the policy."""

    policy: str
    wait_s: np.ndarray
    jct_s: np.ndarray
    times: np.ndarray
    util_pct: np.ndarray
    last_arrival: float
    seconds: float
    preemptions: int = 0
    queue_of: tuple[str, ...] = ()  # per task
    sites_rule: str = ""  # with sites (``site_dispatch.py``): the rule that chose them
    gib_moved: float = 0.0  # data moved to the sites chosen, GiB
    gpu_hours_lost: float = 0.0  # work preempted tasks lost since their last checkpoint
    demand_pct: np.ndarray | None = None  # GPU % running or waiting, at ``times``
    grows: int | None = None  # replicas elastic tasks were given (None: no elastic tasks asked)
    shrinks: int | None = None  # extra replicas elastic tasks gave back for pending tasks
    moves: int | None = None  # tasks moved to defragment (None: defragmentation off)
    gpu_hours_lost_moves: float = 0.0  # work moved tasks lost since their last checkpoint
    gpu_hours_served: float = 0.0  # GPU-hours allocated over the whole replay
    large: np.ndarray | None = None  # per task: it asks 4 or more whole cards
    faster_moves: int | None = None  # tasks moved to faster cards (None: the option off)
    gpu_hours_lost_faster: float = 0.0  # work those moves lost since the last checkpoint
    consolidation_moves: int | None = None  # of ``moves``, made in quiet periods (None: off)

    def large_mean_wait_s(self) -> float:
        """Mean wait (s) of the placed tasks asking 4 or more whole cards (0: none)."""
        if self.large is None:
            return 0.0
        waits = self.wait_s[self.large & ~np.isnan(self.wait_s)]
        return round(float(waits.mean()), 1) if waits.size else 0.0

    def unallocated_over_time(self, bins: int = 10) -> list[float]:
        """Unallocated GPU % (100 - allocated), its mean over each of ``bins`` equal spans of the
        arrival window (the utilisation is a step function over the event times)."""
        times, util = self.times, self.util_pct
        if not times.size:
            return []
        start, end = float(times[0]), self.last_arrival
        edges = np.linspace(start, end, bins + 1)
        out: list[float] = []
        for lo, hi in itertools.pairwise(edges):
            ends = np.clip(np.append(times[1:], end), lo, hi)
            spans = np.clip(ends - np.clip(times, lo, hi), 0.0, None)
            total = spans.sum()
            out.append(round(float(100.0 - (util * spans).sum() / total), 1) if total else 0.0)
        return out

    def wait_by_queue(self) -> dict[str, float]:
        """Mean wait (s) of the placed tasks of each queue."""
        out: dict[str, float] = {}
        names = np.asarray(self.queue_of)
        for queue in sorted(set(self.queue_of)):
            waits = self.wait_s[(names == queue) & ~np.isnan(self.wait_s)]
            out[queue] = round(float(waits.mean()), 1) if waits.size else 0.0
        return out

    def summary(self) -> dict[str, float]:
        placed = ~np.isnan(self.wait_s)
        ends = np.minimum(np.append(self.times[1:], self.last_arrival), self.last_arrival)
        spans = np.clip(ends - self.times, 0.0, None)
        mean_util = float((self.util_pct * spans).sum() / spans.sum()) if spans.sum() else 0.0
        waits = self.wait_s[placed]
        unallocated_at_peak = 0.0
        if self.demand_pct is not None and self.demand_pct.size:
            over = self.demand_pct >= 100.0
            if over.any() and spans[over].sum():
                idle = (100.0 - self.util_pct) * spans
                unallocated_at_peak = float(idle[over].sum() / spans[over].sum())
            else:  # never above capacity: at the instant demand peaked
                unallocated_at_peak = float(100.0 - self.util_pct[int(self.demand_pct.argmax())])
        return {
            "tasks": float(self.wait_s.size),
            "never_placed": float((~placed).sum()),
            "mean_util_pct": round(mean_util, 3),
            "peak_util_pct": round(float(self.util_pct.max(initial=0.0)), 3),
            "mean_wait_s": round(float(waits.mean()), 1) if waits.size else 0.0,
            "p95_wait_s": round(float(np.percentile(waits, 95)), 1) if waits.size else 0.0,
            "mean_jct_s": round(float(self.jct_s[placed].mean()), 1) if waits.size else 0.0,
            "preemptions": float(self.preemptions),
            "gpu_hours_lost": round(self.gpu_hours_lost, 3),
            "unallocated_at_peak_pct": round(unallocated_at_peak, 3),
            "seconds": round(self.seconds, 3),
            **({"gib_moved": round(self.gib_moved, 1)} if self.sites_rule else {}),
            **(
                {"grows": float(self.grows), "shrinks": float(self.shrinks or 0)}
                if self.grows is not None
                else {}
            ),
            **(self._moved() if self.moves is not None else {}),
            **(
                {
                    "faster_moves": float(self.faster_moves),
                    "gpu_hours_lost_faster": round(self.gpu_hours_lost_faster, 3),
                }
                if self.faster_moves is not None
                else {}
            ),
        }

    def _moved(self) -> dict[str, float]:
        """The defragmentation figures: moves, the work they lost and its share of the served."""
        served = self.gpu_hours_served
        return {
            "moves": float(self.moves or 0),
            "gpu_hours_lost_moves": round(self.gpu_hours_lost_moves, 3),
            "lost_moves_pct_of_served": (
                round(100 * self.gpu_hours_lost_moves / served, 3) if served else 0.0
            ),
            "large_mean_wait_s": self.large_mean_wait_s(),
            **(
                {"consolidation_moves": float(self.consolidation_moves)}
                if self.consolidation_moves is not None
                else {}
            ),
        }


@dataclass(slots=True, eq=False)
class _Task:
    """One trace task as the cycle and the retry gate see it: pending work, then (once placed)
    running work. ``tenant`` is its queue's; it has no backoff (a trace task does not fail)."""

    id: int
    rank: int  # arrival order: its place in the queue, kept when it is preempted
    queue: str
    tenant: str
    priority: int
    request: Request
    tried: int = NEVER_TRIED  # the capacity generation it last failed at (engine/cycle/retry_gate)
    not_before: float = 0.0
    waiting_on: set[int] = field(default_factory=set)
    allocations: list[Allocation] = field(default_factory=list)
    stopping: Stopping | None = None
    run_start: int = 0  # when its current run began
    done_s: float = 0.0  # run time saved by checkpoints of earlier runs
    ends_at: int = 0  # when its current run ends (a departure for another time is void)
    moved_at: int | None = None  # moved to defragment then: its wait goes on from its last one
    run_s: float = 0.0  # the whole run's time on the cards of its current run (with speeds)
    done_frac: float = 0.0  # share of its work saved by checkpoints of earlier runs (speeds)


def timed_replay(
    nodes: Sequence[Node],
    tasks: Sequence[TraceTask],
    policy: Profile | str,
    seed: int,
    workload: TargetWorkload,
    order: QueueOrder = QueueOrder.FIFO,
    compress: float = 1.0,
    queues: QueueConfig | None = None,
    on_pass: Callable[[int, list[int]], None] | None = None,
    speeds: TaskSpeeds | None = None,
    dispatch: Callable[[Engine], Dispatch] | None = None,
    checkpoints: CheckpointModel | None = None,
    checkpoint_aware: bool = False,
    history_half_life_s: float | None = None,
    on_run: Callable[[int, int, Sequence[Allocation] | None], None] | None = None,
    elastic: ElasticTasks | None = None,
    reservations: ReservationPlan | None = None,
    defrag: DisruptionBudget | None = None,
    defrag_min_cards: float = 4.0,
    faster: FasterRule | None = None,
    partitions: TimedPartitions | None = None,
    consolidate: ConsolidationRule | None = None,
) -> TimedResult:
    """Run ``tasks`` by their trace times under ``policy``; see the module docstring.

    ``compress`` > 1 brings arrivals closer together (times divided by it) while durations stay
    as recorded: the trace is a sample, so this is how to ask "what if the load were N times higher".
    ``queues`` maps tasks to queues and priorities (``sim/queue_config.py``); without it ``order``
    says whether priorities come from the tasks' QoS classes. ``on_pass(now, tried)`` is told,
    after each pass, the tasks it tried (indices into ``tasks``, in the order tried).
    ``speeds`` (``sim/task_speeds.py``) gives each task's request and its duration on the cards
    it gets, for traces whose run times depend on the card (Gavel's).
    ``dispatch`` builds, on the replay's engine, the rule that sends each task to a site as it
    arrives (``site_dispatch.py``); a task then starts no sooner than its data is there.
    ``checkpoints`` says when tasks save their progress (None: never); ``checkpoint_aware``
    lets the planner weigh what each victim would lose (see the module docstring).
    ``history_half_life_s`` orders tenants by the share they held over a window decaying with
    that half-life (``engine/cycle/fair_share.py``) instead of DRF on what they hold now.
    ``on_run(now, task, allocations)`` is told each run's start (its allocations) and end (None:
    finished or preempted), as ``sim/energy.py`` meters them.
    ``elastic`` makes a share of the multi-card tasks elastic (``sim/elastic_tasks.py``): they
    are admitted at half their size, grown after every event's passes into idle capacity
    (``engine/cycle/elastic.py``) and shrunk for pending tasks before any task is preempted;
    their run time follows their size. Not with ``speeds``.
    ``reservations`` (``sim/reservation_plan.py``) are made before the first arrival; at each
    window's start its borrowers are stopped as victims are, at its end its own tasks still
    running are stopped for good, and a task submitted into a window that has ended is never
    placed (``engine/cycle/reservations.py``).
    ``defrag`` (a disruption budget) turns on online defragmentation (``engine/cycle/defrag.py``):
    a task asking ``defrag_min_cards`` or more cards that fits nowhere may have the fewest tasks
    that checkpoint (under ``checkpoints``) moved, within the budget: each is stopped as a victim
    is (it keeps what it saved), requeued and placed again after the task it made room for; their
    moves and lost work are counted apart from preemptions.
    ``faster`` (with ``speeds``) turns on moves to faster cards (``engine/cycle/faster_cards.py``):
    after the passes of an instant, when every pending task was refused at the capacity there is,
    a running task whose remaining run ends sooner on free faster cards by the rule's margins (the
    work since its last checkpoint under ``checkpoints`` redone there) is moved: it keeps the
    share of its work it saved, restarts there after the rule's ``restart_s`` and runs the rest at
    the new cards' speed; moves and the work they lost are counted apart from preemptions.
    ``partitions`` (``sim/partition_timed.py``) replays on a pool of cards cut into hardware
    partitions: it gives the engine and each task's request, and with a re-cut rule a partition
    request that fits nowhere has cards re-cut at once (the engine rebuilt) and is placed again.
    ``consolidate`` (with ``defrag``) turns on consolidation in quiet periods
    (``engine/cycle/consolidate.py``): after the passes of an instant, when no task has waited
    for the rule's quiet time, the few movable tasks whose moves free cards for the largest shape
    the workload expects are moved at once (each keeps what it saved, restarts on its new cards
    and runs the rest); they count as moves, within the same budget.
    """
    if compress <= 0:
        raise ValueError("compress must be positive")
    if elastic is not None and speeds is not None:
        raise ValueError("elastic tasks run by the trace's durations: not with speeds")
    if consolidate is not None and defrag is None:
        raise ValueError(
            "consolidation moves work within the defragmentation's budget: needs defrag"
        )
    if faster is not None and (speeds is None or dispatch is not None or reservations is not None):
        raise ValueError("moves to faster cards need speeds, and no sites or reservations")
    if partitions is not None and (
        speeds is not None
        or dispatch is not None
        or reservations is not None
        or defrag is not None
        or faster is not None
    ):  # a re-cut replaces the engine that sites, reservations and moves hold; speeds ask
        # their own requests
        raise ValueError("partitions: not with speeds, sites, reservations or moves")
    arrive_at = [int(t.creation_time / compress) for t in tasks]
    kernels.warm()  # once per process: not part of this replay's seconds
    started = time.perf_counter()
    if partitions is not None:
        engine = partitions.engine()
        on_run = partitions.chain(on_run)
    else:
        engine = Engine(ClusterState(nodes, seed=seed), policy, seed=seed, workload=workload)
    config = queues if queues is not None else QueueConfig.single(order is QueueOrder.PRIORITY)
    interval = checkpoints.intervals_s(len(tasks)) if checkpoints else np.full(len(tasks), NEVER)
    now = 0

    def cost_of(i: int) -> StopCost:
        job = work[i]
        saved = saved_s(now - job.run_start, float(interval[i]))
        last = job.run_start + saved if saved > 0 else None
        return stop_cost(now, job.run_start, last, None)

    aware = cost_of if checkpoint_aware else None
    history = None if history_half_life_s is None else DecayedUsage(history_half_life_s)
    admission = Admission(engine, config.queues, history, (lambda: now) if history else None)
    book: Reservations | None = None
    if reservations is not None:
        plan = reservations

        def terms(i: int) -> Terms:
            job = work[i]
            preemptible = plan.borrow_below is None or job.priority < plan.borrow_below
            duration = float(tasks[i].duration_s)
            return Terms(plan.members.get(i), job.tenant, tasks[i].name, preemptible, duration)

        book = Reservations(lambda: now, terms, lend=plan.lend)
        for reservation in plan.reservations:
            book.add(reservation, engine)
    mover: Defrag | None = None
    if defrag is not None:

        def move_facts(i: int) -> MoveFacts | None:
            """A task that checkpoints may move (an elastic one shrinks instead)."""
            if i in elastic_ids or not math.isfinite(float(interval[i])):
                return None
            lost = cost_of(i).lost_s * tasks[i].gpu_request_milli / 1000
            return MoveFacts(work[i].tenant, work[i].request, lost)

        mover = Defrag(move_facts, lambda: now, defrag, min_cards=defrag_min_cards)
    quicker: FasterCards | None = None
    if faster is not None:

        def run_facts(i: int) -> RunFacts | None:
            """A running task, with the run time it has left and would lose if moved now."""
            job = work[i]
            if job.stopping or i in elastic_ids:
                return None
            return RunFacts(job.queue, job.request, job.ends_at - now, cost_of(i).lost_s)

        quicker = FasterCards(run_facts, faster)
    cycle = SchedulingCycle(
        admission, stop_costs=aware, reservations=book, defrag=mover, faster=quicker
    )
    cycle.recuts = None if partitions is None else partitions.offer
    edges = [] if book is None else book.edges()
    next_edge = 0
    gate = RetryGate()
    sited = None if dispatch is None else dispatch(engine)
    ready_at = [0] * len(tasks)  # when each task's data is at its site (trace seconds)
    tenant_of = {q.name: q.tenant for q in config.queues}
    capacity = capacity_milli(nodes)
    work: list[_Task] = []
    elastic_ids = set() if elastic is None else elastic.choose(list(tasks))
    for i, task in enumerate(tasks):
        queue, priority = config.assign(task)
        base = speeds.request(i, task) if speeds is not None else to_request(task)
        if partitions is not None:
            base = partitions.request(task)
        request = replace(base, priority=priority)
        if elastic is not None and i in elastic_ids:
            request = elastic.request(task, request)
        work.append(_Task(i, 0, queue, tenant_of.get(queue, queue), priority, request))
    if consolidate is not None and mover is not None:
        # every shape the replay's tasks ask, the rare large ones too (a target workload keeps
        # the common 95 %)
        seen = TargetWorkload.from_requests((w.request for w in work), coverage=1.0)
        cycle.consolidation = Consolidation(mover, consolidate, lambda: seen)
    wait = np.full(len(tasks), np.nan)
    jct = np.full(len(tasks), np.nan)
    arrivals = sorted(range(len(tasks)), key=lambda i: (arrive_at[i], i))
    for rank, i in enumerate(arrivals):
        work[i].rank = rank
    departures: list[tuple[int, int, int]] = []  # (time, task index, its first allocation id)
    pending: list[_Task] = []  # in arrival order
    running: dict[int, _Task] = {}
    used = 0
    waiting = 0  # GPU milli of the pending tasks
    preempted = moved = faster_moves = consolidated = 0
    lost_card_s = moved_card_s = faster_card_s = 0.0
    times: list[float] = []
    util: list[float] = []
    demand: list[float] = []
    next_arrival = 0
    retry_at: int | None = None  # the periodic pass that tries the retries left out
    period = max(1, round(PERIODIC_PASS_S))  # trace times are whole seconds
    grows = shrinks = 0

    def milli_of(job: _Task) -> int:
        """GPU milli ``job`` holds now: an elastic task's follows its replicas."""
        if job.id in elastic_ids:
            return CARD_MILLI * len(job.allocations)
        return tasks[job.id].gpu_request_milli

    def resized(job: _Task, at: int) -> None:
        """An elastic task's size changed at ``at``: its end moves (its old departure is void)."""
        assert elastic is not None
        job.ends_at = elastic.resized(job.id, at, len(job.allocations))
        jct[job.id] = job.ends_at - arrive_at[job.id]
        heapq.heappush(departures, (job.ends_at, job.id, job.allocations[0].id))

    def release(job: _Task) -> None:
        nonlocal used
        for alloc in job.allocations:
            cycle.admission.release(alloc.id)
        used -= milli_of(job)
        if on_run is not None:
            on_run(now, job.id, None)
        gate.capacity_changed()

    def stop_victims(
        victims: Sequence[object], stopped_now: list[_Task], moves: bool = False
    ) -> None:
        """Stop ``victims`` (running tasks) at once: each keeps what it saved by its last
        checkpoint; the rest of its run is lost work. ``moves``: they are moved to defragment."""
        nonlocal waiting, preempted, lost_card_s, moved, moved_card_s
        for victim in victims:
            assert isinstance(victim, _Task)
            stopped = running.pop(victim.id)
            ran = now - stopped.run_start
            saved = saved_s(ran, float(interval[stopped.id]))
            if elastic is not None and stopped.id in elastic_ids:
                lost = elastic.stopped(stopped.id, now, saved / ran if ran > 0 else 0.0)
            else:
                stopped.done_s += saved
                stopped.done_frac += saved / stopped.run_s if stopped.run_s else 0.0
                lost = (ran - saved) * tasks[stopped.id].gpu_request_milli / 1000
            if moves and mover is not None:
                mover.ledger.record(now, stopped.tenant, lost)
                moved_card_s += lost
                moved += 1
            else:
                lost_card_s += lost
                preempted += 1
            waiting += tasks[stopped.id].gpu_request_milli
            release(stopped)
            stopped.allocations = []
            jct[stopped.id] = np.nan
            if moves and mover is not None:
                stopped.moved_at = now  # its wait so far stands; the time until placed adds
            else:
                wait[stopped.id] = np.nan
            stopped_now.append(stopped)

    def shrink_for(decision: Shrink, by: _Task) -> None:
        """Release ``decision``'s extra replicas at once, for pending task ``by``."""
        nonlocal used, shrinks
        sizes = {j: len(work[j].allocations) for j, _ in decision.extras}
        release_extras(admission, cycle.elastic, decision, by.id, sizes)
        gone = {a.id for _, a in decision.extras}
        for j in sizes:
            job = work[j]
            used -= milli_of(job)
            job.allocations = [a for a in job.allocations if a.id not in gone]
            used += milli_of(job)
            resized(job, now)
        shrinks += len(gone)
        gate.capacity_changed()

    def grow_elastic(now: int) -> bool:
        """One replica more for each elastic task below its maximum, where there is room;
        whether any grew (the server's next periodic pass then grows them again)."""
        nonlocal used, grows
        elastic_running = [running[i] for i in sorted(running) if i in elastic_ids]
        grown = grow(admission, cycle.elastic, elastic_running)
        for growth in grown:
            job = work[growth.job]
            job.allocations.append(growth.allocation)
            used += CARD_MILLI
            grows += 1
            resized(job, max(now, job.run_start))
        return bool(grown)

    def recut(decision: Recutting) -> None:
        """Carry out ``decision``'s re-cuts at once: the engine rebuilt, what runs kept."""
        assert partitions is not None
        allocations = {i: job.allocations for i, job in running.items()}
        rebuilt, kept = partitions.carry_out(decision.recuts, allocations)
        for i, readdressed in kept.items():
            running[i].allocations = readdressed
        admission.rebase(rebuilt)
        cycle.engine = rebuilt
        cycle.begin_pass()  # refusals recorded on the old cards say nothing now
        gate.capacity_changed()

    def requeue(stopped_now: list[_Task]) -> None:
        for stopped in stopped_now:  # back in the queue at their first arrival, as new
            stopped.tried = NEVER_TRIED
            bisect.insort(pending, stopped, key=lambda t: t.rank)

    def one_pass(now: int) -> tuple[bool, bool]:
        """Try the pending tasks the retry gate lets in, once each; returns whether to run
        another pass at once (something was preempted, or a backlog fits) and whether retries
        were left out."""
        nonlocal used, waiting
        choice = gate.choose(pending, now)
        candidates = choice.jobs
        cycle.begin_pass()
        placed: set[int] = set()
        closed: set[int] = set()
        stopped_now: list[_Task] = []
        order = cycle.order(candidates)
        for index in order:
            job = candidates[index]
            generation = gate.generation
            decision = cycle.decide(job, running)
            if isinstance(decision, Shrink):  # extra replicas go first, at once
                shrink_for(decision, job)
                decision = cycle.decide(job, running)
            if isinstance(decision, Preempt):
                # Its victims stop at once here: it takes the room they leave now, before a
                # task tried after it in this pass could (the server's victims take time to
                # stop, and the preemptor waits for them; a lower task taking their room
                # would be preempted in turn, its victim take the room again, for ever).
                stop_victims(decision.victims, stopped_now, decision.moves)
                decision = cycle.decide(job, running)
            if isinstance(decision, Recutting) and decision.new:
                recut(decision)
                decision = cycle.decide(job, running)
            if isinstance(decision, Place):
                i = job.id
                job.allocations = list(decision.admitted.placement.allocations)
                running[i] = job
                placed.add(i)
                runs_s = (
                    tasks[i].duration_s if speeds is None else speeds.duration_s(i, job.allocations)
                )
                start = max(now, ready_at[i])  # it holds its cards while its data arrives
                if job.moved_at is None:
                    wait[i] = start - arrive_at[i]
                else:  # a moved task waits again only from its move
                    wait[i] += start - job.moved_at
                    job.moved_at = None
                used += milli_of(job)
                waiting -= tasks[i].gpu_request_milli
                job.run_start = start
                if elastic is not None and i in elastic_ids:
                    resized(job, start)
                else:
                    job.run_s = float(runs_s)
                    left_s = runs_s - job.done_s if speeds is None else runs_s * (1 - job.done_frac)
                    job.ends_at = start + max(0, math.ceil(left_s))
                    jct[i] = job.ends_at - arrive_at[i]
                    heapq.heappush(departures, (job.ends_at, i, job.allocations[0].id))
                if on_run is not None:
                    on_run(start, i, job.allocations)
                if sited is not None:
                    sited.started(i)
                continue
            if isinstance(decision, Wait) and isinstance(decision.outcome, ReservationClosed):
                closed.add(job.id)  # never runs: refused, as the server fails it
                continue
            if isinstance(decision, Wait) and isinstance(decision.outcome, ReservationAhead):
                job.not_before = decision.outcome.start_s  # tried afresh when its window begins
                continue
            gate.failed(job, generation)
        if on_pass is not None:
            on_pass(now, [candidates[index].id for index in order])
        pending[:] = [t for t in pending if t.id not in placed and t.id not in closed]
        requeue(stopped_now)
        return bool(stopped_now) or choice.again_at_once(len(placed)), choice.left_out

    def restart_on(job: _Task, allocations: Sequence[Allocation], restart_s: float) -> float:
        """Stop running ``job`` now and restart it on ``allocations`` (committed) after
        ``restart_s``: it keeps what its last checkpoint saved and runs the rest (at the new
        cards' speed, with speeds); returns the card-seconds it lost."""
        i = job.id
        ran = now - job.run_start
        saved = saved_s(ran, float(interval[i]))
        job.done_s += saved
        job.done_frac += saved / job.run_s if job.run_s else 0.0
        if on_run is not None:
            on_run(now, i, None)
        job.allocations = list(allocations)
        job.run_start = now + math.ceil(restart_s)
        if speeds is None:
            left_s = job.run_s - job.done_s
        else:
            job.run_s = float(speeds.duration_s(i, job.allocations))
            left_s = job.run_s * (1 - job.done_frac)
        job.ends_at = job.run_start + max(0, math.ceil(left_s))
        jct[i] = job.ends_at - arrive_at[i]
        heapq.heappush(departures, (job.ends_at, i, job.allocations[0].id))
        if on_run is not None:
            on_run(job.run_start, i, job.allocations)
        return max(0.0, ran - saved) * tasks[i].gpu_request_milli / 1000

    def move_to_faster(now: int) -> bool:
        """Move running tasks to free faster cards (the cycle's rule), when every pending task
        was refused at the capacity there is now; whether any moved."""
        nonlocal faster_moves, faster_card_s
        if quicker is None or not all(gate.tried_now(t) for t in pending):
            return False
        assert speeds is not None and faster is not None
        moves = cycle.move_to_faster(running)
        for move in moves:
            assert isinstance(move.job, _Task)
            placed = move.admitted.placement.allocations
            faster_card_s += restart_on(move.job, placed, faster.restart_s)
            faster_moves += 1
        if moves:
            gate.capacity_changed()  # its slow cards are free: a pending task may fit there
        return bool(moves)

    def consolidate_quiet() -> bool:
        """Move the tasks the cycle's consolidation picks when the pool is quiet: each keeps
        what it saved and restarts at once on its new cards; whether any moved."""
        nonlocal moved, moved_card_s, consolidated
        if cycle.consolidation is None:
            return False
        moves = cycle.consolidate(running, waiting=bool(pending))
        for move in moves:
            assert isinstance(move.job, _Task)
            moved_card_s += restart_on(move.job, move.admitted.placement.allocations, 0.0)
            moved += 1
            consolidated += 1
        if moves:
            gate.capacity_changed()
        return bool(moves)

    def window_edge() -> None:
        """A reservation's window begins or ends: stop its borrowers (back in the queue, as
        victims) and its own tasks past its end (for good: a reservation's task runs inside it)."""
        assert book is not None
        gate.capacity_changed()  # cards held or freed: every waiting task may fare otherwise
        stopped_now: list[_Task] = []
        stop_victims([job for job, _ in book.reclaims(running)], stopped_now)
        requeue(stopped_now)
        for job, _ in book.overruns(running):
            assert isinstance(job, _Task)
            del running[job.id]
            release(job)
            jct[job.id] = now - arrive_at[job.id]

    while (
        next_arrival < len(arrivals) or departures or retry_at is not None or next_edge < len(edges)
    ):
        arrival_time = arrive_at[arrivals[next_arrival]] if next_arrival < len(arrivals) else None
        departure_time = departures[0][0] if departures else None
        next_event = min((t for t in (arrival_time, departure_time) if t is not None), default=None)
        edge = math.ceil(edges[next_edge]) if next_edge < len(edges) else None
        if (  # after the departures of that instant, before its arrivals and periodic pass
            edge is not None
            and (departure_time is None or edge < departure_time)
            and (arrival_time is None or edge <= arrival_time)
            and (retry_at is None or edge <= retry_at)
        ):
            now = edge
            while next_edge < len(edges) and edges[next_edge] <= now:
                next_edge += 1
            window_edge()
        elif retry_at is not None and (next_event is None or retry_at < next_event):
            now = retry_at  # the periodic pass, before any event
        elif departures and (arrival_time is None or departures[0][0] <= arrival_time):
            now = departures[0][0]
            while departures and departures[0][0] == now:
                _, i, first = heapq.heappop(departures)
                job = work[i]
                if i not in running or job.allocations[0].id != first or job.ends_at != now:
                    continue  # preempted or resized since: this departure is void
                release(job)
                del running[i]
                if sited is not None:
                    sited.finished(job.request, tasks[i].duration_s)
        else:
            assert arrival_time is not None
            now = arrival_time
            while next_arrival < len(arrivals) and arrive_at[arrivals[next_arrival]] == now:
                job = work[arrivals[next_arrival]]
                if sited is not None:
                    job.request, transfer_s = sited.arrive(job.id, job.request)
                    ready_at[job.id] = now + math.ceil(transfer_s)
                pending.append(job)
                waiting += tasks[arrivals[next_arrival]].gpu_request_milli
                next_arrival += 1
        again, left_out = one_pass(now)
        while again:
            again, left_out = one_pass(now)
        if move_to_faster(now):
            again, left_out = one_pass(now)
            while again:
                again, left_out = one_pass(now)
        consolidate_quiet()
        grew = bool(elastic_ids) and grow_elastic(now)
        retry_at = now + period if left_out or grew else None
        times.append(float(now))
        util.append(100.0 * used / capacity if capacity else 0.0)
        demand.append(100.0 * (used + waiting) / capacity if capacity else 0.0)
    last_arrival = float(max(arrive_at, default=0))
    spans = np.diff(np.asarray(times), append=times[-1] if times else 0.0)
    served_h = float((np.asarray(util) / 100.0 * spans).sum()) * capacity / 1000 / 3600
    large = np.array([t.num_gpu >= 4 and t.gpu_milli >= 1000 for t in tasks], dtype=bool)
    return TimedResult(
        policy if isinstance(policy, str) else policy.name,
        wait,
        jct,
        np.asarray(times),
        np.asarray(util),
        last_arrival,
        time.perf_counter() - started,
        preempted,
        tuple(w.queue for w in work),
        "" if sited is None else sited.rule,
        0.0 if sited is None else sited.gib_moved,
        lost_card_s / 3600.0,
        np.asarray(demand),
        None if elastic is None else grows,
        None if elastic is None else shrinks,
        None if mover is None else moved,
        moved_card_s / 3600.0,
        served_h,
        large,
        None if quicker is None else faster_moves,
        faster_card_s / 3600.0,
        None if cycle.consolidation is None else consolidated,
    )
