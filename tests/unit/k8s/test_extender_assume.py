"""The extender's filter holds the shares of the node it answers until the pod's bind comes, on a
real ClusterView and engine with the default profile.

kube-scheduler runs a pod's bind in the background and goes on with the next pod at once, so the
next filter may come before the bind. Without the hold, a pod of 4 cards and one of 3 on nodes of
4 and 3 free cards were both answered the 4-card node (the default profile ties the two nodes for
the 3-card pod): the second bind took 3 of its cards and the first pod's bind failed, leaving it
pending (seen in a CI run of tests/e2e/k8s/test_extender_gang_e2e.py, and here before the hold).
"""

from __future__ import annotations

from typing import Any

from extender_kit import ApiPods

from xpupool.k8s.extender.verbs import ASSUME_S, Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord, PodRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingApi(ApiPods):
    """Holds pods, annotates and binds without an apiserver; records the binds."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: list[tuple[str, str]] = []

    def annotate_pod(self, *args: object) -> None:
        pass

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound.append((name, node))


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def setup() -> tuple[ClusterView, Extender, RecordingApi, Clock]:
    view = ClusterView(no_decoder, no_decoder)  # the default profile
    for node in (gpu_node("four", count=4, group_size=0), gpu_node("three", count=3, group_size=0)):
        view.on_node(Event(EventType.ADDED, node.name, f"uid-{node.name}", NodeRecord(node, True)))
    api, clock = RecordingApi(), Clock()
    ext = Extender(view, api, lambda node, demand, allocs: {}, clock=clock)
    return view, ext, api, clock


def pod(name: str, gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def filter_(ext: Extender, p: dict[str, Any]) -> list[str]:
    result = ext.filter(ExtenderArgs(Pod=p, NodeNames=["four", "three"]))
    return list(result.node_names or [])


def bind(ext: Extender, api: RecordingApi, p: dict[str, Any], node: str) -> str:
    api.add(p)  # the pod as the apiserver holds it: bind reads it there
    meta = p["metadata"]
    args = ExtenderBindingArgs(
        PodName=meta["name"], PodNamespace=meta["namespace"], PodUID=meta["uid"], Node=node
    )
    return ext.bind(args).error


def free_cards(view: ClusterView) -> int:
    with view.engine_locked() as engine:
        s = engine.state
        return int((s.dev_mem_free[s.dev_present] == s.dev_mem_total[s.dev_present]).sum())


def test_the_next_filter_before_a_bind_is_not_answered_the_same_cards() -> None:
    view, ext, api, _ = setup()
    big, small = pod("big", 4), pod("small", 3)
    assert filter_(ext, big) == ["four"]
    assert filter_(ext, small) == ["three"]  # was "four": big's bind had not come yet
    assert bind(ext, api, small, "three") == ""
    assert bind(ext, api, big, "four") == ""  # failed before: small held 3 of its cards
    assert sorted(api.bound) == [("big", "four"), ("small", "three")]
    assert free_cards(view) == 0


def test_the_bind_takes_the_cards_the_filter_held() -> None:
    view, ext, api, _ = setup()
    small = pod("small", 3)
    (node,) = filter_(ext, small)
    held = view.reservation("uid-small")
    assert held is not None and free_cards(view) == 4
    assert bind(ext, api, small, node) == ""
    assert view.reservation("uid-small") == held  # the same shares, placed once
    assert free_cards(view) == 4


def test_a_pod_filtered_again_does_not_compete_with_its_own_hold() -> None:
    view, ext, _, _ = setup()
    big = pod("big", 4)
    assert filter_(ext, big) == ["four"]
    assert filter_(ext, big) == ["four"]  # kube-scheduler retried it: one hold, not two
    assert free_cards(view) == 3


def test_a_hold_whose_bind_never_comes_lapses() -> None:
    view, ext, _, clock = setup()
    assert filter_(ext, pod("big", 4)) == ["four"]
    assert filter_(ext, pod("other", 4)) == []  # held
    clock.now += ASSUME_S + 1
    assert filter_(ext, pod("other", 4)) == ["four"]  # big's hold lapsed: other holds it now
    assert view.reservation("uid-big") is None
    assert free_cards(view) == 3


def test_a_deleted_pod_gives_its_hold_back() -> None:
    view, ext, _, _ = setup()
    assert filter_(ext, pod("big", 4)) == ["four"]
    gone = PodRecord("ns/big", None, 0, None)
    view.on_pod(Event(EventType.DELETED, "ns/big", "uid-big", gone))
    assert free_cards(view) == 7
    assert filter_(ext, pod("other", 4)) == ["four"]
