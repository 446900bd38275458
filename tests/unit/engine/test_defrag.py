"""Online defragmentation (issue 54 part 3): the fewest moves of movable running work after which
a pending job fits and the moved jobs fit again, within a disruption budget, and the cycle's
decision that carries them out."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace

from xpupool.engine import Engine
from xpupool.engine.cycle import Admission, QueueSpec
from xpupool.engine.cycle.cycle import Preempt, SchedulingCycle, Wait
from xpupool.engine.cycle.defrag import (
    Defrag,
    DisruptionBudget,
    Movable,
    MoveFacts,
    MoveLedger,
    plan_moves,
)
from xpupool.engine.cycle.work import Stopping
from xpupool.engine.outcomes import Defragmenting, MovedToDefragment, render
from xpupool.engine.txn import Transaction
from xpupool.model import Allocation, DeviceRequest, Request

from factories import engine_for, gpu_node


@dataclass
class Job:
    """Running (or pending) work as the cycle and the planner see it."""

    id: int
    priority: int
    request: Request
    queue: str = "q"
    tenant: str = "t"
    lost_card_s: float = 0.0
    movable: bool = True
    waiting_on: set[int] = field(default_factory=set)
    allocations: list[Allocation] = field(default_factory=list)
    stopping: Stopping | None = None


def cards(n: int, name: str = "j", priority: int = 0) -> Request:
    return Request(name, 0, 0, DeviceRequest(count=n), priority=priority)


def share(permille: int, name: str = "s", count: int = 1) -> Request:
    """``count`` cards' ``permille`` thousandths of compute (and as much memory) each."""
    return Request(name, 0, 0, DeviceRequest(count=count, core_permille=permille))


def pool(*counts: int) -> Engine:
    return engine_for(*(gpu_node(f"n{i}", count=c) for i, c in enumerate(counts)))


def start(engine: Engine, running: dict[int, Job], job: Job, node: int) -> Job:
    """Place ``job`` on node ``node`` (the test lays out the fragmentation by hand)."""
    mask = engine.state.dev_present.copy()
    mask[:] = False
    mask[node] = engine.state.dev_present[node]
    placed = engine.place(job.request, within=mask)
    assert placed.ok, placed.failures
    job.allocations = list(placed.allocations)
    running[job.id] = job
    return job


def start_on_card(engine: Engine, running: dict[int, Job], job: Job, node: int, card: int) -> Job:
    """Place ``job`` (one card or a share of one) on card ``card`` of node ``node``."""
    mask = engine.state.dev_present.copy()
    mask[:] = False
    mask[node, card] = True
    placed = engine.place(job.request, within=mask)
    assert placed.ok, placed.failures
    job.allocations = list(placed.allocations)
    running[job.id] = job
    return job


def movable(running: dict[int, Job], pending_priority: int = 0) -> list[Movable]:
    return [
        Movable(j, MoveFacts(j.tenant, j.request, j.lost_card_s))
        for j in running.values()
        if j.movable and j.priority <= pending_priority
    ]


def test_moves_the_one_job_whose_cards_complete_a_node() -> None:
    engine, running = pool(4, 4), {}
    start(engine, running, Job(1, 0, cards(2)), 0)
    start(engine, running, Job(2, 0, cards(1)), 0)
    start(engine, running, Job(3, 0, cards(1)), 1)  # 4 cards free, 1 + 3 scattered
    plan = plan_moves(engine, cards(4), movable(running))
    assert plan is not None
    assert plan.job_ids == (3,)  # one move: node 1 then holds the 4 cards
    assert {a.node for a in plan.frees} == {"n1"}
    assert len(engine.state.live) == 3  # a what-if: nothing moved
    assert plan_moves(engine, cards(2), movable(running)) is None  # fits as it is


def test_no_plan_when_a_moved_job_could_not_run_again() -> None:
    engine, running = pool(4, 4), {}
    start(engine, running, Job(1, 0, cards(3)), 0)
    start(engine, running, Job(2, 0, cards(3)), 1)  # 2 free, 1 + 1: room for neither again
    assert plan_moves(engine, cards(2), movable(running)) is None


def test_only_movable_work_of_its_priority_or_below_moves() -> None:
    engine, running = pool(4, 4, 2), {}
    start(engine, running, Job(1, 0, cards(2)), 0)
    start(engine, running, Job(2, 0, cards(1), movable=False), 0)
    start(engine, running, Job(3, 5, cards(1)), 1)
    start(engine, running, Job(4, 0, cards(1)), 1)
    # job 3 matters more than a priority-0 job and job 2 does not checkpoint: jobs 1 and 4 may
    # move, which frees node 0 or node 1 only to 3 cards
    assert plan_moves(engine, cards(4), movable(running, pending_priority=0)) is None
    plan = plan_moves(engine, cards(4), movable(running, pending_priority=5))
    assert plan is not None and plan.job_ids == (3, 4)


def test_among_the_fewest_moves_the_one_losing_least() -> None:
    engine, running = pool(4, 4), {}
    start(engine, running, Job(1, 0, cards(1), lost_card_s=900.0), 0)
    start(engine, running, Job(2, 0, cards(1), lost_card_s=60.0), 1)  # 3 free + 3 free
    plan = plan_moves(engine, cards(4), movable(running))
    assert plan is not None and plan.job_ids == (2,) and plan.lost_card_s == 60.0


def test_an_eight_card_node_of_shares_is_emptied_for_an_eight_card_job() -> None:
    # node 0: two half-card tasks on each of its 8 cards; nodes 1 and 2 have 7 and 4 cards free
    # beside work that does not move: only emptying node 0 (16 moves) makes room for 8 cards
    engine, running = pool(8, 8, 8), {}
    for card in range(8):
        for half in range(2):
            i = 1 + 2 * card + half
            start_on_card(engine, running, Job(i, 0, share(500, f"s{i}")), 0, card)
    start(engine, running, Job(17, 0, cards(1), movable=False), 1)
    start(engine, running, Job(18, 0, cards(4), movable=False), 2)
    plan = plan_moves(engine, cards(8), movable(running))
    assert plan is not None, "no plan for an 8-card job on a node of shares"
    assert plan.job_ids == tuple(range(1, 17))
    assert {a.node for a in plan.frees} == {"n0"}
    assert plan.trials == 1  # one set frees every card of node 0: tried once, and it works
    assert len(engine.state.live) == 18  # a what-if: nothing moved
    assert plan_moves(engine, cards(8), movable(running), max_moves=15) is None  # the bound


def test_a_cards_shares_move_together_and_the_card_freed_by_fewest_moves_wins() -> None:
    # card 0: two half-card tasks; card 1: one whole-card task; cards 2, 3 free. A 3-card job
    # needs one card more: moving one half frees no card, moving the whole-card task frees one
    engine, running = pool(4, 4), {}
    start_on_card(engine, running, Job(1, 0, share(500, "a"), lost_card_s=1.0), 0, 0)
    start_on_card(engine, running, Job(2, 0, share(500, "b"), lost_card_s=1.0), 0, 0)
    start_on_card(engine, running, Job(3, 0, cards(1), lost_card_s=500.0), 0, 1)
    start(engine, running, Job(4, 0, cards(2), movable=False), 1)
    plan = plan_moves(engine, cards(3), movable(running))
    assert plan is not None and plan.job_ids == (3,) and plan.trials == 1
    running[3].movable = False  # now only the two halves together free a card
    plan = plan_moves(engine, cards(3), movable(running))
    assert plan is not None and plan.job_ids == (1, 2)
    # a half-card job needs only half a card: one half moves (the 3-card job's search aside)
    plan = plan_moves(engine, share(500, count=3), movable(running))
    assert plan is not None and plan.job_ids == (1,)


def test_the_budget_refuses_moves_past_a_tenants_hour_and_the_days_lost_hours() -> None:
    engine, running = pool(4, 4), {}
    start(engine, running, Job(1, 0, cards(1), tenant="a", lost_card_s=600.0), 0)
    start(engine, running, Job(2, 0, cards(1), tenant="b", lost_card_s=7200.0), 1)
    ledger = MoveLedger(DisruptionBudget(moves_per_tenant_hour=1, lost_gpu_hours_day=3.0))
    plan = plan_moves(engine, cards(4), movable(running), ledger.allowance(0.0))
    assert plan is not None and plan.job_ids == (1,)  # least lost
    ledger.record(0.0, "a", 600.0)
    # tenant a moved once this hour: b's job moves instead, though it loses more
    plan = plan_moves(engine, cards(4), movable(running), ledger.allowance(1800.0))
    assert plan is not None and plan.job_ids == (2,)
    ledger.record(1800.0, "b", 7200.0)  # 2 GPU-hours lost of the day's 3, with a's 600 card-s
    assert plan_moves(engine, cards(4), movable(running), ledger.allowance(3000.0)) is None
    # an hour after a's move it may move again: 600 card-s more stays within the day's 3 hours
    plan = plan_moves(engine, cards(4), movable(running), ledger.allowance(3601.0))
    assert plan is not None and plan.job_ids == (1,)
    running[1].lost_card_s = 3600.0  # now moving a's job would pass the day's 3 GPU-hours
    assert plan_moves(engine, cards(4), movable(running), ledger.allowance(3601.0)) is None
    # a day after, the losses are forgotten
    plan = plan_moves(engine, cards(4), movable(running), ledger.allowance(1800.0 + 86_400.0))
    assert plan is not None and plan.job_ids == (1,)
    zero = MoveLedger(DisruptionBudget(moves_per_tenant_hour=0, lost_gpu_hours_day=None))
    assert plan_moves(engine, cards(4), movable(running), zero.allowance(0.0)) is None


def _brute_force(engine: Engine, req: Request, jobs: list[Job]) -> int | None:
    """The fewest of ``jobs`` to release so that ``req`` fits and all of them fit again in some
    order (0: it fits as it is), by trying every subset and every order; None: no subset works."""
    state = engine.state
    for size in range(len(jobs) + 1):
        for subset in itertools.combinations(jobs, size):
            for order in itertools.permutations(subset):
                with Transaction(state) as trial:
                    for j in subset:
                        for a in j.allocations:
                            trial.release(a.id)
                    if not engine.place(req, txn=trial).ok:
                        break  # no order helps: the request does not fit
                    if all(engine.place(j.request, txn=trial).ok for j in order):
                        return size
    return None


def _random_case(
    seed: int, kinds: list[Request], asks: list[Request], most: int
) -> tuple[Engine, dict[int, Job], Request]:
    """A small pool of 2- and 4-card nodes with 3 to ``most`` running jobs drawn from ``kinds``,
    each on a random node, and a pending request drawn from ``asks``."""
    rnd = random.Random(seed)
    engine = pool(*(rnd.choice((2, 4)) for _ in range(rnd.randint(2, 3))))
    running: dict[int, Job] = {}
    for i in range(1, rnd.randint(3, most) + 1):
        job = Job(i, 0, replace(rnd.choice(kinds), name=f"j{i}"), movable=rnd.random() < 0.8)
        nodes = list(range(engine.state.n_nodes))
        rnd.shuffle(nodes)
        for node in nodes:
            mask = engine.state.dev_present.copy()
            mask[:] = False
            mask[node] = engine.state.dev_present[node]
            placed = engine.place(job.request, within=mask)
            if placed.ok:
                job.allocations = list(placed.allocations)
                running[i] = job
                break
    return engine, running, replace(rnd.choice(asks), name="pending")


def _matches_brute_force(
    kinds: list[Request], asks: list[Request], most: int, cases: int = 60
) -> int:
    """Plans of as many moves as the brute force finds, on ``cases`` cases; the cases that
    needed moves."""
    checked = 0
    for seed in range(cases):
        engine, running, req = _random_case(seed, kinds, asks, most)
        jobs = [j for j in running.values() if j.movable]
        expected = _brute_force(engine, req, jobs)
        plan = plan_moves(engine, req, movable(running), max_moves=len(jobs), max_trials=10_000)
        if expected in (None, 0):
            assert plan is None, (seed, expected, plan)
        else:
            assert plan is not None and len(plan.moves) == expected, (seed, expected, plan)
            checked += 1
    return checked


def test_fewest_moves_match_brute_force_on_small_pools() -> None:
    kinds, asks = [cards(1), cards(1), cards(2)], [cards(2), cards(3), cards(4)]
    checked = _matches_brute_force(kinds, asks, most=4)
    assert checked >= 10  # enough of the pools needed moves for the comparison to mean something


def test_fewest_moves_match_brute_force_with_shares_of_cards() -> None:
    kinds = [share(250), share(500), share(500), share(750), cards(1), cards(2)]
    asks = [cards(2), cards(3), cards(4), share(750, count=2), share(500, count=3)]
    checked = _matches_brute_force(kinds, asks, most=5, cases=150)
    assert checked >= 10


def test_the_cycle_moves_work_for_a_job_that_fits_nowhere_and_names_it() -> None:
    engine = pool(4, 4)
    running: dict[int, Job] = {}
    start(engine, running, Job(1, 0, cards(2)), 0)
    start(engine, running, Job(2, 0, cards(1)), 0)
    start(engine, running, Job(3, 0, cards(1)), 1)
    admission = Admission(engine, [QueueSpec("q", "t", ())])
    for job in running.values():  # charged as admitted work is
        for alloc in job.allocations:
            admission.restore(alloc, "q", "*", in_engine=False)
    pending = Job(9, 0, cards(4, "big"))
    assert isinstance(SchedulingCycle(admission).decide(pending, running), Wait)  # off: waits

    def facts(i: int) -> MoveFacts | None:
        j = running[i]
        return MoveFacts(j.tenant, j.request, j.lost_card_s) if j.movable else None

    cycle = SchedulingCycle(admission, defrag=Defrag(facts, lambda: 0.0))
    decision = cycle.decide(pending, running)
    assert isinstance(decision, Preempt) and decision.moves and not decision.reclaim
    assert isinstance(decision.outcome, Defragmenting)
    assert [v.id for v in decision.victims] == [3]
    assert render(decision.outcome).endswith("; moving job(s) [3] to defragment")
    assert render(MovedToDefragment(9)) == (
        "moved to defragment: checkpointed, stopped and requeued so that job 9 fits"
    )
    running[3].stopping = Stopping.PREEMPT  # being moved: not chosen again (nor counted as room)
    again = cycle.decide(pending, running)
    assert isinstance(again, Preempt) and [v.id for v in again.victims] == [1, 2]
