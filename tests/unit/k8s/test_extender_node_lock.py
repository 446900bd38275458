"""The extender's bind around HAMi's node lock, in-process on a real ClusterView and engine: the lock
is written before the pod's annotations and Binding, a failed bind releases it and gives the shares
back, and a bind whose node stays locked answers ``Error`` having written nothing."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from extender_kit import ApiPods, gpumem_pod, no_decoder

from xpupool.k8s.codec.node_lock import LOCK_KEY, NodeConflictError, NodeLocks, encode_lock
from xpupool.k8s.extender.verbs import BindError, Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node

T0 = datetime(2026, 11, 27, 5, 10, 45, tzinfo=UTC)


class Cluster(ApiPods):
    """Pods and Nodes without an apiserver, logging every write in order; the Node carries HAMi's
    registration annotation unless told otherwise."""

    def __init__(self, hami: bool = True) -> None:
        super().__init__()
        self.node_annotations: dict[str, str] = (
            {"hami.io/node-nvidia-register": "[]"} if hami else {}
        )
        self.version = 1
        self.writes: list[tuple[str, str]] = []
        self.refuse_binding = False

    def annotate_pod(self, namespace: str, name: str, *args: object) -> None:
        self.writes.append(("annotate", name))

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.refuse_binding:
            raise BindError("409 Conflict: pod already bound")
        self.writes.append(("bind", name))

    def get_node(self, name: str) -> dict[str, Any]:
        meta = {"name": name, "resourceVersion": str(self.version)}
        return {"metadata": {**meta, "annotations": dict(self.node_annotations)}}

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: Mapping[str, str | None]
    ) -> None:
        if resource_version != str(self.version):
            raise NodeConflictError("409")
        for key, value in annotations.items():
            if value is None:
                self.node_annotations.pop(key, None)
                self.writes.append(("unlock", key))
            else:
                self.node_annotations[key] = value
                self.writes.append(("lock", value))
        self.version += 1

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        return False


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def setup(api: Cluster, wait_s: float = 2.0) -> tuple[ClusterView, Extender, Clock]:
    view = ClusterView(no_decoder, no_decoder)
    node = gpu_node("a100", count=4, group_size=0)
    view.on_node(Event(EventType.ADDED, node.name, "uid-a100", NodeRecord(node, True)))
    clock = Clock()
    locks = NodeLocks(api, wait_s=wait_s, now=lambda: T0, monotonic=clock, sleep=clock.sleep)
    ext = Extender(view, api, lambda node, demand, allocs: {}, clock=clock, locks=locks)
    return view, ext, clock


def bind(ext: Extender, api: Cluster, pod: dict[str, Any]) -> str:
    api.add(pod)  # the pod as the apiserver holds it: bind reads it there
    assert ext.filter(ExtenderArgs(Pod=pod, NodeNames=["a100"])).node_names == ["a100"]
    meta = pod["metadata"]
    args = ExtenderBindingArgs(
        PodName=meta["name"], PodNamespace="ns", PodUID=meta["uid"], Node="a100"
    )
    return ext.bind(args).error


def test_the_lock_is_taken_before_the_annotations_and_the_binding_and_left_for_the_plugin() -> None:
    api = Cluster()
    _, ext, _ = setup(api)
    assert bind(ext, api, gpumem_pod("p1", 8000)) == ""
    assert api.writes == [("lock", encode_lock(T0, "ns", "p1")), ("annotate", "p1"), ("bind", "p1")]
    assert api.node_annotations[LOCK_KEY] == "2026-11-27T05:10:45Z,ns,p1"


def test_a_node_without_hamis_device_plugin_is_not_locked() -> None:
    api = Cluster(hami=False)
    _, ext, _ = setup(api)
    assert bind(ext, api, gpumem_pod("p1", 8000)) == ""
    assert api.writes == [("annotate", "p1"), ("bind", "p1")]


def test_a_refused_binding_releases_the_lock_and_the_shares() -> None:
    api = Cluster()
    view, ext, _ = setup(api)
    api.refuse_binding = True
    error = bind(ext, api, gpumem_pod("p1", 8000))
    assert "bind to a100 failed" in error
    assert LOCK_KEY not in api.node_annotations
    assert api.writes[-1] == ("unlock", LOCK_KEY)
    assert view.reservation("uid-p1") is None


def test_a_node_locked_by_another_pod_for_the_whole_wait_is_refused_writing_nothing() -> None:
    api = Cluster()
    held = encode_lock(T0, "ns", "first")
    api.node_annotations[LOCK_KEY] = held
    view, ext, clock = setup(api, wait_s=2.0)
    error = bind(ext, api, gpumem_pod("p2", 8000))
    assert "locked by HAMi's node lock" in error
    assert api.writes == []
    assert api.node_annotations[LOCK_KEY] == held
    assert view.reservation("uid-p2") is None
    assert clock.t >= 2.0
