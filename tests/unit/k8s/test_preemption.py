"""preemption.py on a real ClusterView and engine, the extender's filter driving it: the planner's
fewest lower-priority victims are evicted and their shares held for the preemptor until they are
gone; a refused eviction charges the victim again (before the preemptor's hold is given back, so
the victim's shares cannot be lost); events of a pod being evicted change nothing; a nomination
that times out gives its shares back. The e2e tests run the same against kube-scheduler."""

from __future__ import annotations

from typing import Any

from xpupool.k8s.extender.preemption import EvictionRefusedError, Preemptions
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs
from xpupool.k8s.informers.cluster_view import (
    CardShare,
    ClusterView,
    NodeRecord,
    PodDevices,
    PodRecord,
)
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node

CARD_MIB = 81920


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Evictor:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.calls: list[tuple[str, str, str]] = []
        self.gone: set[str] = set()  # UIDs the API answers 404 for

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append((namespace, name, uid))
        if self.refuse:
            raise EvictionRefusedError("429 Too Many Requests: would violate a disruption budget")

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        return uid in self.gone


class NoApi:
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        raise AssertionError("not used")

    def annotate_pod(self, *args: object) -> None:
        pass

    def bind_pod(self, *args: object) -> None:
        pass


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def setup(refuse: bool = False) -> tuple[ClusterView, Extender, Evictor, Clock]:
    view = ClusterView(no_decoder, no_decoder, profile="binpack")
    node = gpu_node("n1", count=1, memory_mib=CARD_MIB)
    view.on_node(Event(EventType.ADDED, "n1", "uid-n1", NodeRecord(node, True)))
    uuid = node.devices[0].uuid
    for name, mib, prio in (("big", 50000, 100), ("small", 20000, 100), ("peer", 10000, 1000)):
        devices = PodDevices("n1", ((CardShare(uuid, mib, 0),),))
        rec = PodRecord(f"ns/{name}", "n1", prio, devices)
        view.on_pod(Event(EventType.ADDED, f"ns/{name}", f"uid-{name}", rec))
    evictor, clock = Evictor(refuse), Clock()
    pre = Preemptions(view, evictor, clock=clock, nomination_s=60)
    return view, Extender(view, NoApi(), lambda n, d, a: {}, preemptions=pre), evictor, clock


def high_pod(mib: int = 40000) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}
    return {
        "metadata": {"name": "high", "namespace": "ns", "uid": "uid-high"},
        "spec": {"priority": 1000, "containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


def filter_high(ext: Extender) -> tuple[list[str], dict[str, str]]:
    args = ExtenderArgs.model_validate({"Pod": high_pod(), "Nodes": None, "NodeNames": ["n1"]})
    result = ext.filter(args)
    return list(result.node_names or []), dict(result.failed_nodes or {})


def used_mib(view: ClusterView) -> int:
    with view.engine_locked() as engine:
        return CARD_MIB - int(engine.state.node_dev_mem_free.sum())


def test_the_fewest_lower_priority_victims_go_and_their_shares_wait_for_the_preemptor() -> None:
    view, ext, evictor, _ = setup()
    assert used_mib(view) == 80000
    fits, failed = filter_high(ext)
    assert fits == []
    assert "preempting 1 lower-priority pod(s) on n1: ns/big" in failed["n1"]
    assert evictor.calls == [("ns", "big", "uid-big")]  # not small, never peer (same priority)
    assert used_mib(view) == 20000 + 10000 + 40000  # big's shares are the preemptor's now
    # the victim is still shutting down: its events change nothing, the preemptor waits
    devices = PodDevices("n1", ((CardShare(view.nodes()["n1"].node.devices[0].uuid, 50000, 0),),))  # type: ignore[union-attr]
    rec = PodRecord("ns/big", "n1", 100, devices)
    view.on_pod(Event(EventType.MODIFIED, "ns/big", "uid-big", rec))
    assert used_mib(view) == 70000
    fits, failed = filter_high(ext)
    assert fits == [] and "waiting for 1 preempted pod(s) to leave n1: ns/big" in failed["n1"]
    assert len(evictor.calls) == 1  # no second eviction
    view.on_pod(Event(EventType.DELETED, "ns/big", "uid-big", rec))
    assert filter_high(ext) == (["n1"], {})
    assert used_mib(view) == 70000  # bind takes the held shares; nothing placed twice


def test_a_refused_eviction_charges_the_victim_again() -> None:
    view, ext, _, _ = setup(refuse=True)
    fits, failed = filter_high(ext)
    assert fits == [] and "evicting ns/big: 429" in failed["n1"]
    assert used_mib(view) == 80000  # big holds its 50 GB again; the preemptor holds nothing
    assert view.reservation("uid-high") is None


def test_a_nomination_that_is_not_bound_in_time_gives_its_shares_back() -> None:
    view, ext, _, clock = setup()
    filter_high(ext)
    assert view.reservation("uid-high") is not None
    clock.now += 61
    assert ext.preemptions is not None
    ext.preemptions.sweep()
    assert view.reservation("uid-high") is None
    assert used_mib(view) == 30000  # big is gone for good (evicted); its shares are free


def test_a_victim_the_api_says_is_gone_frees_the_pod_before_the_view_hears_of_it() -> None:
    """kube-scheduler retries the pod as soon as its own watch sees the victim deleted; this
    view's watch may lag. Seen in CI: the retry was told to wait, and no later event woke the
    pod. Now filter asks the API about victims still leaving."""
    view, ext, evictor, _ = setup()
    filter_high(ext)
    assert "waiting for 1 preempted pod(s)" in filter_high(ext)[1]["n1"]
    evictor.gone.add("uid-big")  # deleted in the API; no DELETED event here yet
    assert filter_high(ext) == (["n1"], {})
    uuid = view.nodes()["n1"].node.devices[0].uuid  # type: ignore[union-attr]
    rec = PodRecord("ns/big", "n1", 100, PodDevices("n1", ((CardShare(uuid, 50000, 0),),)))
    view.on_pod(Event(EventType.MODIFIED, "ns/big", "uid-big", rec))  # a late event: ignored
    assert used_mib(view) == 70000
    view.on_pod(Event(EventType.DELETED, "ns/big", "uid-big", rec))
    assert used_mib(view) == 70000 and not view.evicting("uid-big")
