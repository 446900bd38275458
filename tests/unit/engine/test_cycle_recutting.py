"""The cycle proposes a re-cut for a partition request whose profile is free on no card: the
card and layout the rule chooses among the cards the front offers, the re-cuts already in flight
for the job instead of new ones, nothing for other requests, and nothing changed while deciding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from test_cycle import Held, Job  # the cycle's work, as its own tests give it

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card
from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.cycle import Admission, Place, Preempt, QueueSpec, SchedulingCycle, Wait
from xpupool.engine.cycle.recutting import Recutting
from xpupool.engine.cycle.stop_cost import StopCost
from xpupool.engine.cycle.work import RunningWork
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.outcomes import Code, PreemptingLowerPriority, render
from xpupool.engine.partition_recut import recut_choice
from xpupool.engine.recut_proposal import PartitionCard, Recut, RecutRule
from xpupool.engine.verdict import Verdicts
from xpupool.model import DeviceRequest, Node, Request

from factories import engine_for, gpu_node, partition_scheme

A100 = partition_scheme("A100-SXM4-80GB")
TWO_3G: Layout = (("3g.40gb", 0), ("3g.40gb", 4))


def _rule(
    scheme: PartitionScheme, cards: Sequence[tuple[Layout, frozenset[Instance]]], profile: str
) -> tuple[int, Layout] | None:
    return recut_choice(scheme, cards, profile, TargetWorkload((), ()))


@dataclass
class Offer:
    """A front's offer: fixed cards, the re-cuts in flight per job, and what it was asked."""

    offered: list[PartitionCard]
    flight: dict[int, tuple[Recut, ...]] = field(default_factory=dict)
    asked: list[int] = field(default_factory=list)
    rule: RecutRule = _rule

    def in_flight(self, job: int) -> tuple[Recut, ...]:
        return self.flight.get(job, ())

    def cards(self, job: int) -> Sequence[PartitionCard]:
        self.asked.append(job)
        return self.offered


def _node(layout: Layout) -> Node:
    """Node n0 with one A100 cut as ``layout``."""
    whole = gpu_node("n0", count=1)
    card = whole.devices[0]
    return replace(whole, devices=cut_card(card, layout, load_partitions(), load_accelerators()))


def _cycle(layout: Layout, offer: Offer | None) -> SchedulingCycle:
    engine = engine_for(_node(layout))
    cycle = SchedulingCycle(Admission(engine, [QueueSpec("q", "t", ())]), Verdicts(engine.state))
    cycle.recuts = offer
    return cycle


def _job(job_id: int, devices: DeviceRequest) -> Job:
    return Job(job_id, "q", 0, Request(f"j{job_id}", 1000, 1024, devices))


def _card(busy: frozenset[Instance] = frozenset()) -> PartitionCard:
    return PartitionCard("n0", "GPU-0", A100, TWO_3G, busy)


def test_a_profile_free_nowhere_waits_for_the_card_the_rule_recuts() -> None:
    offer = Offer([_card()])
    cycle = _cycle(TWO_3G, offer)
    before = cycle.engine.state.dev_mem_free.copy()
    decision = cycle.decide(_job(1, DeviceRequest(count=1, partition="4g.40gb")), {})
    assert isinstance(decision, Recutting) and decision.new
    (recut,) = decision.recuts
    assert (recut.node, recut.uuid) == ("n0", "GPU-0")
    assert sorted(recut.layout) == [("3g.40gb", 4), ("4g.40gb", 0)] and recut.destroyed == 1
    assert decision.outcome.code is Code.RECUTTING_CARDS
    text = render(decision.outcome)
    assert "re-cutting GPU-0 on n0 to " in text and "4g.40gb@0" in text, text
    assert text.endswith("for this job"), text
    assert (cycle.engine.state.dev_mem_free == before).all()  # deciding changed nothing


def test_a_card_whose_busy_instance_is_in_the_way_is_never_cut() -> None:
    offer = Offer([_card(busy=frozenset({("3g.40gb", 0)}))])
    decision = _cycle(TWO_3G, offer).decide(_job(1, DeviceRequest(1, partition="4g.40gb")), {})
    assert isinstance(decision, Wait)  # a 4g starts at slice 0 only, where a 3g is busy
    assert offer.asked == [1]
    # a re-cut could serve it once that work ends: it waits for room, not for ever
    assert decision.outcome.code is Code.NO_NODE_FITS, render(decision.outcome)


def test_without_a_card_to_recut_a_profile_no_instance_has_never_fits() -> None:
    decision = _cycle(TWO_3G, Offer([])).decide(_job(1, DeviceRequest(1, partition="4g.40gb")), {})
    assert isinstance(decision, Wait)
    assert decision.outcome.code is Code.NEVER_FITS, render(decision.outcome)


def test_a_job_with_a_recut_in_flight_waits_for_it_and_asks_no_other() -> None:
    asked = Recut("n0", "GPU-0", TWO_3G, (("4g.40gb", 0), ("3g.40gb", 4)))
    offer = Offer([_card()], flight={1: (asked,)})
    decision = _cycle(TWO_3G, offer).decide(_job(1, DeviceRequest(1, partition="4g.40gb")), {})
    assert isinstance(decision, Recutting) and not decision.new
    assert decision.recuts == (asked,)
    assert offer.asked == []  # no other card was looked for


def test_no_recut_without_an_offer_or_for_a_request_of_no_partition() -> None:
    decision = _cycle(TWO_3G, None).decide(_job(1, DeviceRequest(1, partition="4g.40gb")), {})
    assert isinstance(decision, Wait)
    offer = Offer([_card()])
    whole = _cycle(TWO_3G, offer).decide(_job(2, DeviceRequest(count=1)), {})
    assert isinstance(whole, Wait) and offer.asked == []


def test_a_free_instance_of_the_profile_is_taken_without_a_recut() -> None:
    offer = Offer([_card()])
    decision = _cycle(TWO_3G, offer).decide(_job(1, DeviceRequest(1, partition="3g.40gb")), {})
    assert not isinstance(decision, Recutting | Wait)
    assert offer.asked == []


def test_a_resting_card_is_not_cut_though_a_recut_could_serve_later() -> None:
    offer = Offer([replace(_card(), resting=True)])
    decision = _cycle(TWO_3G, offer).decide(_job(1, DeviceRequest(1, partition="4g.40gb")), {})
    assert isinstance(decision, Wait)
    assert decision.outcome.code is Code.NO_NODE_FITS, render(decision.outcome)  # not never


def _held_cards(
    priorities: Sequence[int | None], cards: int = 1, ripening: bool = True
) -> tuple[SchedulingCycle, dict[int, RunningWork]]:
    """Node n0 with ``cards`` A100s cut 3g.40gb@0 + 3g.40gb@4, offered with their instances'
    UUIDs and every instance busy; job ``i + 1`` holds the ``i``-th instance (card by card, in
    slice order) with priority ``priorities[i]``, or held it and is gone (None: its instance is
    kept only for the front's minimum idle time, or for good, cordoned, without ``ripening``)."""
    whole = gpu_node("n0", count=cards)
    parts = load_partitions(), load_accelerators()
    devices = tuple(d for card in whole.devices for d in cut_card(card, TWO_3G, *parts))
    engine = engine_for(replace(whole, devices=devices))
    cycle = SchedulingCycle(Admission(engine, [QueueSpec("q", "t", ())]), Verdicts(engine.state))
    running: dict[int, RunningWork] = {}
    for i, (device, priority) in enumerate(zip(devices, priorities, strict=True)):
        want = DeviceRequest(1, partition="3g.40gb", uuids=(device.uuid,))
        decision = cycle.decide(Job(i + 1, "q", 0, Request("j", 1000, 1024, want)), {})
        assert isinstance(decision, Place)
        if priority is not None:
            allocs = list(decision.admitted.placement.allocations)
            running[i + 1] = Held(i + 1, priority, allocs)
    offered = []
    for card in whole.devices:
        mine = [d for d in devices if d.partition_of == card.uuid]
        layout = tuple((d.partition or "", d.partition_start) for d in mine)
        uuids = tuple(d.uuid for d in mine)
        gone = frozenset(
            i
            for i, d in zip(layout, mine, strict=True)
            if ripening and priorities[devices.index(d)] is None
        )
        busy = frozenset(layout)
        offered.append(
            PartitionCard("n0", card.uuid, A100, layout, busy, uuids=uuids, ripening=gone)
        )
    cycle.recuts = Offer(offered)
    return cycle, running


def _four_g(job_id: int, priority: int) -> Job:
    return Job(
        job_id, "q", priority, Request("j", 1000, 1024, DeviceRequest(1, partition="4g.40gb"))
    )


def test_lower_priority_work_on_the_slices_a_recut_needs_is_preempted_for_it() -> None:
    cycle, running = _held_cards([1, 9])
    live = dict(cycle.engine.state.live)
    decision = cycle.decide(_four_g(3, 5), running)
    assert isinstance(decision, Preempt), decision
    assert isinstance(decision.outcome, PreemptingLowerPriority), render(decision.outcome)
    # the 4g.40gb starts at slice 0: the priority-1 job there stops, the priority-9 one runs on
    assert [v.id for v in decision.victims] == [1]
    # the front lets the re-cut take that instance at once (no minimum idle time)
    assert decision.recut_freed == set(running[1].allocations[0].device_uuids)
    assert cycle.engine.state.live == live  # deciding changed nothing


def test_work_of_equal_or_higher_priority_is_never_preempted_for_a_recut() -> None:
    cycle, running = _held_cards([5, 1])
    decision = cycle.decide(_four_g(3, 5), running)
    assert isinstance(decision, Wait), decision


def test_no_more_work_is_preempted_while_freed_slices_wait_out_the_idle_minimum() -> None:
    # the first card's slice 0 was freed (its job gone) and waits out the minimum idle time; the
    # second card's slice 0 holds lower-priority work that a re-cut there would stop
    cycle, running = _held_cards([None, 9, 1, 9], cards=2)
    decision = cycle.decide(_four_g(5, 5), running)
    assert isinstance(decision, Wait), decision


def test_a_cordoned_instance_nobody_holds_does_not_hold_back_a_preemption() -> None:
    # the first card's slice 0 holds nothing but is kept busy for good (cordoned, or
    # unhealthy), not for the minimum idle time: a re-cut of the second card stops its
    # lower-priority work
    cycle, running = _held_cards([None, 9, 1, 9], cards=2, ripening=False)
    decision = cycle.decide(_four_g(5, 5), running)
    assert isinstance(decision, Preempt), decision
    assert [v.id for v in decision.victims] == [3]


def test_work_inside_its_minimum_run_time_is_not_preempted_for_a_recut() -> None:
    # the priority-1 job on slice 0 ran less than its minimum run time: spared, as the
    # preemption planner spares it, unless the queue preempts inside the minimum
    cycle, running = _held_cards([1, 9])
    cycle.stop_costs = lambda job_id: StopCost(0.0, False, protected=job_id == 1)
    decision = cycle.decide(_four_g(3, 5), running)
    assert isinstance(decision, Wait), decision
    cycle.stop_costs = lambda job_id: StopCost(0.0, False, protected=False)
    decision = cycle.decide(_four_g(3, 5), running)
    assert isinstance(decision, Preempt) and [v.id for v in decision.victims] == [1], decision


def test_guaranteed_work_is_not_preempted_for_a_recut() -> None:
    # QoS guaranteed: priority never takes it (eviction.py), for a re-cut either
    cycle, running = _held_cards([1, 9])
    held = running[1]
    running[1] = replace(held, allocations=[replace(a, guaranteed=True) for a in held.allocations])
    decision = cycle.decide(_four_g(3, 5), running)
    assert isinstance(decision, Wait), decision


MIXED: Layout = (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))


def _gang(job_id: int, replicas: int) -> Job:
    want = DeviceRequest(1, partition="3g.40gb")
    return Job(job_id, "q", 0, Request("j", 1000, 1024, want, replicas=replicas, gang=True))


def test_a_gang_placed_in_part_waits_for_the_recuts_its_other_members_need() -> None:
    # a free 3g.40gb@0 holds one member; the other needs 2g@4 + 1g@6 cut into 3g.40gb@4
    offer = Offer([PartitionCard("n0", "GPU-0", A100, MIXED)])
    cycle = _cycle(MIXED, offer)
    live = dict(cycle.engine.state.live)
    decision = cycle.decide(_gang(1, 2), {})
    assert isinstance(decision, Recutting) and decision.new, decision
    (recut,) = decision.recuts
    assert sorted(recut.layout) == [("3g.40gb", 0), ("3g.40gb", 4)], recut
    assert cycle.engine.state.live == live  # deciding changed nothing


def test_a_gang_whose_members_cannot_all_be_cut_for_gets_no_recut() -> None:
    # three 3g.40gb on one A100 (two at most): all or nothing, so nothing is cut
    offer = Offer([PartitionCard("n0", "GPU-0", A100, MIXED)])
    decision = _cycle(MIXED, offer).decide(_gang(1, 3), {})
    assert isinstance(decision, Wait), decision


def test_a_job_of_several_replicas_placed_in_part_waits_for_the_recuts_the_rest_need() -> None:
    # not a gang: the free 3g.40gb@0 takes one replica and the other fits nowhere; the job runs
    # whole, so it is given back and the second replica's card is re-cut as a gang's would be
    offer = Offer([PartitionCard("n0", "GPU-0", A100, MIXED)])
    cycle = _cycle(MIXED, offer)
    live = dict(cycle.engine.state.live)
    want = DeviceRequest(1, partition="3g.40gb")
    decision = cycle.decide(Job(1, "q", 0, Request("j", 1000, 1024, want, replicas=2)), {})
    assert isinstance(decision, Recutting) and decision.new, decision
    (recut,) = decision.recuts
    assert sorted(recut.layout) == [("3g.40gb", 0), ("3g.40gb", 4)], recut
    assert cycle.engine.state.live == live  # deciding changed nothing


def test_replicas_are_not_cut_for_on_a_node_with_cpu_for_one_of_them() -> None:
    # two A100s cut 3g+3g on one node with CPU for one replica: a re-cut of both cards for two
    # 4g.40gb replicas could not be used (one replica's CPU is short), so none is proposed
    whole = replace(gpu_node("n0", count=2), cpu_milli=1500)
    parts = load_partitions(), load_accelerators()
    devices = tuple(d for card in whole.devices for d in cut_card(card, TWO_3G, *parts))
    engine = engine_for(replace(whole, devices=devices))
    cycle = SchedulingCycle(Admission(engine, [QueueSpec("q", "t", ())]), Verdicts(engine.state))
    cycle.recuts = Offer([PartitionCard("n0", c.uuid, A100, TWO_3G) for c in whole.devices])
    want = DeviceRequest(1, partition="4g.40gb")
    request = Request("j", 1000, 1024, want, replicas=2, gang=True)
    decision = cycle.decide(Job(1, "q", 0, request), {})
    assert not isinstance(decision, Recutting), decision
    one = cycle.decide(Job(2, "q", 0, replace(request, replicas=1, gang=False)), {})
    assert isinstance(one, Recutting) and len(one.recuts) == 1, one  # room for one: cut one
