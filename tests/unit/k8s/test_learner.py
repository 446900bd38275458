"""The extender re-learns its online workload between verbs, not inside the filter that made it
due (``k8s/extender/learner.py``), on a real ClusterView and engine (default profile), with a fake clock."""

from __future__ import annotations

import time
from typing import Any

from extender_kit import QuietApi, gpumem_pod, no_decoder

from xpupool.engine import learning_pace
from xpupool.k8s.extender.gang import GANG_ANNOTATION, GANG_SIZE_ANNOTATION, Gangs
from xpupool.k8s.extender.learner import Learner
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup() -> tuple[ClusterView, Extender, Learner, Clock]:
    view = ClusterView(no_decoder, no_decoder, defer_learning=True)
    for name in ("a", "b", "c"):
        node = gpu_node(name, count=2, group_size=0)
        view.on_node(Event(EventType.ADDED, name, f"uid-{name}", NodeRecord(node, True)))
    clock = Clock()
    return (
        view,
        Extender(view, QuietApi(), lambda node, demand, allocs: {}),
        Learner(view, clock=clock),
        clock,
    )


def filter_(ext: Extender, p: dict[str, Any]) -> None:
    assert ext.filter(ExtenderArgs(Pod=p, NodeNames=["a", "b", "c"])).node_names


def learned(view: ClusterView) -> int:
    with view.engine_locked() as engine:
        [model] = engine._models.values()
        return len(model.frag.workload.shapes)


def test_a_filter_leaves_the_re_learn_to_the_learner() -> None:
    view, ext, learner, _ = setup()
    filter_(ext, gpumem_pod("first", 20000))
    assert learned(view) == 0  # due, not done inside the filter
    with view.engine_locked() as engine:
        assert engine.learning_due
    assert not learner.tick()  # a pod just arrived: the next may follow at once
    assert learner.tick()  # none came since: the first re-learn is not put off further
    assert learned(view) == 1


def test_the_learner_waits_while_pods_arrive_and_re_learns_at_most_once_a_second() -> None:
    view, ext, learner, clock = setup()
    filter_(ext, gpumem_pod("first", 20000))
    learner.tick()
    assert learner.tick()
    filter_(ext, gpumem_pod("second", 40000))  # a new shape: due again
    assert not learner.tick()  # less than a second since the last
    clock.now += learning_pace.EVERY_S
    filter_(ext, gpumem_pod("third", 40000))
    assert not learner.tick()  # a pod just arrived: put off
    clock.now += learning_pace.WAIT_S
    filter_(ext, gpumem_pod("fourth", 40000))
    assert learner.tick()  # put off long enough
    assert learned(view) == 2


def test_the_learner_thread_re_learns_in_the_background() -> None:
    view, ext, learner, _ = setup()
    learner.clock = time.monotonic
    filter_(ext, gpumem_pod("first", 20000))
    learner.start(tick_s=0.01)
    try:
        deadline = time.monotonic() + 10
        while learned(view) == 0:
            assert time.monotonic() < deadline, "the learner never re-learned"
            time.sleep(0.01)
    finally:
        learner.stop()
    assert learner.relearns == 1


def test_a_pod_no_node_holds_now_is_learned_as_a_refusal() -> None:
    """The engine's learners hear of every request, placed or refused; the extender tries a pod
    in a what-if that it rolls back when no node holds it, so it teaches the refusal itself."""
    view, ext, learner, clock = setup()
    for i in range(6):  # every card of the three nodes two-thirds full
        filter_(ext, gpumem_pod(f"big-{i}", 60000))
    refused = ext.filter(ExtenderArgs(Pod=gpumem_pod("waits", 40000), NodeNames=["a", "b", "c"]))
    assert not refused.node_names and refused.failed_nodes
    clock.now += learning_pace.EVERY_S
    learner.tick()
    assert learner.tick()
    assert learned(view) == 2  # 60,000 MiB placed six times, and 40,000 MiB refused


def test_a_gang_member_whose_group_no_node_holds_now_is_learned_as_a_refusal() -> None:
    """As a pod alone: the group's what-if is rolled back, so the extender teaches the refusal."""
    view, _, learner, clock = setup()
    ext = Extender(view, QuietApi(), lambda node, demand, allocs: {}, Gangs(view, wait_s=5))
    for i in range(6):  # every card of the three nodes two-thirds full
        filter_(ext, gpumem_pod(f"big-{i}", 60000))
    member = gpumem_pod("m0", 40000)
    member["metadata"]["annotations"] = {GANG_ANNOTATION: "g", GANG_SIZE_ANNOTATION: "2"}
    refused = ext.filter(ExtenderArgs(Pod=member, NodeNames=["a", "b", "c"]))
    assert not refused.node_names and refused.failed_nodes
    assert all("gang ns/g" in why for why in refused.failed_nodes.values())
    clock.now += learning_pace.EVERY_S
    learner.tick()
    assert learner.tick()
    assert learned(view) == 2  # 60,000 MiB placed six times, and 40,000 MiB refused
