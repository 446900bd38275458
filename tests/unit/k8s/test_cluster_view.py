"""ClusterView fed informer events by hand: the engine follows nodes and pods, a reservation is not
counted twice when its bound pod arrives, and rebuilding from the same records gives the same state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hami_objects import ALLOCATED, DONE, RUNNING, TO_ALLOCATE, container, hami_node, hami_pod

from xpupool.k8s.informers.cluster_view import (
    CardShare,
    ClusterView,
    NodeRecord,
    PodDevices,
    PodRecord,
)
from xpupool.k8s.informers.decoders import decode_node, decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model import DeviceRequest, Request
from xpupool.model.device import Node
from xpupool.model.errors import Conflict, RequestError

from factories import capacity_arrays, gpu_node

GIB = 1024


def node_event(kind: EventType, node: Node, schedulable: bool = True) -> Event[NodeRecord]:
    return Event(kind, node.name, f"uid-{node.name}", NodeRecord(node, schedulable))


def pod_event(
    kind: EventType, uid: str, node: str | None, shares: list[list[tuple[str, int, int]]]
) -> Event[PodRecord]:
    devices = None
    if node is not None and shares:
        devices = PodDevices(
            node, tuple(tuple(CardShare(u, m, c) for u, m, c in c_) for c_ in shares)
        )
    return Event(kind, f"default/{uid}", uid, PodRecord(f"default/{uid}", node, 0, devices))


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def view_with(*nodes: Node) -> ClusterView:
    view = ClusterView(no_decoder, no_decoder, profile="binpack")
    for node in nodes:
        view.on_node(node_event(EventType.ADDED, node))
    return view


def free_mib(view: ClusterView, uuid: str) -> int:
    with view.engine_locked() as engine:
        s = engine.state
        return int(s.dev_mem_free.reshape(-1)[s.uuid_slot[uuid]])


def one_gpu(mib: int) -> Request:
    return Request("p", 0, 0, DeviceRequest(count=1, memory_mib=mib, core_permille=100))


def test_nodes_come_and_go_and_cordon_follows() -> None:
    view = view_with(gpu_node("a", count=2), gpu_node("b", count=2))
    with view.engine_locked() as engine:
        assert engine.state.node_names == ["a", "b"]
        built = view.rebuilds
    view.on_node(node_event(EventType.MODIFIED, gpu_node("a", count=2), schedulable=False))
    with view.engine_locked() as engine:
        assert view.rebuilds == built  # a cordon is set on the live engine
        assert not engine.state.node_schedulable[engine.state.node_index["a"]]
    view.on_node(node_event(EventType.MODIFIED, gpu_node("a", count=4), schedulable=False))
    with view.engine_locked() as engine:
        assert view.rebuilds == built + 1  # new devices: rebuilt, cordon kept
        assert engine.state.node_n_dev[engine.state.node_index["a"]] == 4
        assert not engine.state.node_schedulable[engine.state.node_index["a"]]
    view.on_node(node_event(EventType.DELETED, gpu_node("a", count=4)))
    with view.engine_locked() as engine:
        assert engine.state.node_names == ["b"]


def test_bound_pod_charged_and_released() -> None:
    view = view_with(gpu_node("a", count=2))
    view.on_pod(pod_event(EventType.ADDED, "p1", None, []))  # pending: holds nothing
    assert view.charges() == {}
    view.on_pod(pod_event(EventType.MODIFIED, "p1", "a", [[("a-gpu0", 10 * GIB, 300)]]))
    assert free_mib(view, "a-gpu0") == 70 * GIB
    view.on_pod(pod_event(EventType.MODIFIED, "p1", "a", [[("a-gpu1", 20 * GIB, 300)]]))
    assert (free_mib(view, "a-gpu0"), free_mib(view, "a-gpu1")) == (80 * GIB, 60 * GIB)
    view.on_pod(pod_event(EventType.DELETED, "p1", "a", [[("a-gpu1", 20 * GIB, 300)]]))
    assert free_mib(view, "a-gpu1") == 80 * GIB
    assert view.charges() == {}


def test_pod_before_its_node_is_applied_when_the_node_arrives() -> None:
    view = view_with()
    view.on_pod(pod_event(EventType.ADDED, "p1", "a", [[("a-gpu0", 8 * GIB, 1000)]]))
    with view.engine_locked() as engine:
        assert engine.state.n_nodes == 0
    view.on_node(node_event(EventType.ADDED, gpu_node("a", count=1)))
    assert free_mib(view, "a-gpu0") == 72 * GIB


def test_reservation_is_not_counted_twice_when_the_bound_pod_arrives() -> None:
    view = view_with(gpu_node("a", count=2))
    with view.engine_locked() as engine:
        placement = engine.place(one_gpu(16 * GIB))
        assert placement.ok
        view.reserve("p1", placement.allocations)
        uuid = placement.allocations[0].devices[0].uuid
    assert free_mib(view, uuid) == 64 * GIB
    # its annotation written, still unbound: the reservation stays
    view.on_pod(pod_event(EventType.MODIFIED, "p1", None, []))
    assert free_mib(view, uuid) == 64 * GIB
    view.on_pod(pod_event(EventType.MODIFIED, "p1", "a", [[(uuid, 16 * GIB, 100)]]))
    assert free_mib(view, uuid) == 64 * GIB
    assert not view.unreserve("p1")  # bound now: not a reservation any more
    view.on_pod(pod_event(EventType.DELETED, "p1", "a", [[(uuid, 16 * GIB, 100)]]))
    assert free_mib(view, uuid) == 80 * GIB


def test_unreserve_and_delete_of_an_unbound_reserved_pod_give_back() -> None:
    view = view_with(gpu_node("a", count=1))
    with view.engine_locked() as engine:
        view.reserve("p1", engine.place(one_gpu(16 * GIB)).allocations)
        view.reserve("p2", engine.place(one_gpu(16 * GIB)).allocations)
        with pytest.raises(Conflict):
            view.reserve("p2", ())
    assert view.unreserve("p1")
    assert free_mib(view, "a-gpu0") == 64 * GIB
    view.on_pod(pod_event(EventType.DELETED, "p2", None, []))
    assert free_mib(view, "a-gpu0") == 80 * GIB


def test_bound_elsewhere_replaces_the_reservation() -> None:
    view = view_with(gpu_node("a", count=1), gpu_node("b", count=1))
    with view.engine_locked() as engine:
        placement = engine.place(one_gpu(16 * GIB))
        view.reserve("p1", placement.allocations)
        reserved = placement.allocations[0].devices[0].uuid
    other = "b-gpu0" if reserved == "a-gpu0" else "a-gpu0"
    view.on_pod(pod_event(EventType.MODIFIED, "p1", other[0], [[(other, 8 * GIB, 100)]]))
    assert free_mib(view, reserved) == 80 * GIB
    assert free_mib(view, other) == 72 * GIB


def test_over_commit_from_the_cluster_is_left_unapplied_not_crashing() -> None:
    view = view_with(gpu_node("a", count=1))
    view.on_pod(pod_event(EventType.ADDED, "p1", "a", [[("a-gpu0", 60 * GIB, 500)]]))
    view.on_pod(pod_event(EventType.ADDED, "p2", "a", [[("a-gpu0", 60 * GIB, 500)]]))
    assert free_mib(view, "a-gpu0") == 20 * GIB  # the second does not fit: waits, logged
    assert set(view.charges()) == {"p1", "p2"}
    view.on_pod(pod_event(EventType.DELETED, "p1", "a", []))
    view.on_node(node_event(EventType.MODIFIED, gpu_node("a", count=2)))  # any rebuild retries
    assert free_mib(view, "a-gpu0") == 20 * GIB


def test_rebuild_from_the_same_records_gives_the_same_state() -> None:
    nodes = [gpu_node("b", count=4), gpu_node("a", count=4, model="Tesla T4", memory_mib=15360)]
    first = view_with(*nodes)
    pods = []
    with first.engine_locked() as engine:
        for i, mib in enumerate([4 * GIB, 8 * GIB, 2 * GIB, 30 * GIB, 1 * GIB]):
            placement = engine.place(one_gpu(mib))
            assert placement.ok
            first.reserve(f"p{i}", placement.allocations)
            a = placement.allocations[0]
            pods.append(
                (f"p{i}", a.node, [[(d.uuid, d.memory_mib, d.core_permille)] for d in a.devices])
            )
    for uid, node, shares in pods:  # their bound forms arrive
        first.on_pod(pod_event(EventType.MODIFIED, uid, node, shares))
    second = view_with(*reversed(nodes))  # another order of events
    for uid, node, shares in reversed(pods):
        second.on_pod(pod_event(EventType.ADDED, uid, node, shares))
    with first.engine_locked() as e1, second.engine_locked() as e2:
        a1, a2 = capacity_arrays(e1.state), capacity_arrays(e2.state)
        assert a1.keys() == a2.keys()
        for k in a1:
            np.testing.assert_array_equal(a1[k], a2[k], err_msg=k)


def test_hostile_objects_are_refused_with_the_field_named() -> None:
    def decode_node(obj: dict[str, Any]) -> Node | None:
        raise RequestError("metadata.annotations[x]", "garbage", "not JSON")

    view = ClusterView(decode_node, no_decoder)
    rec = view.node_record({"metadata": {"name": "a"}, "spec": {"unschedulable": "yes"}})
    assert rec == NodeRecord(None, True)  # unreadable: not in the pool; a non-bool is no cordon

    def decode_pod(obj: dict[str, Any]) -> PodDevices | None:
        return PodDevices("elsewhere", ((CardShare("x", 1, 1),),))

    view = ClusterView(no_decoder, decode_pod)
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "a", "priority": True},
        "status": "garbage",
    }
    assert view.pod_record(pod) == PodRecord("ns/p", "a", 0, None)  # names another node
    pod["spec"] = {"nodeName": "a", "priority": 10**12}
    pod["status"] = {"phase": "Succeeded"}
    assert view.pod_record(pod) == PodRecord("ns/p", "a", 2_000_000_000, None)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: CardShare("", 1, 1), "uuid"),
        (lambda: CardShare("u", -1, 1), "memory_mib"),
        (lambda: CardShare("u", 1, True), "core_permille"),
        (lambda: CardShare("u", 1, 10**7), "core_permille"),
        (lambda: PodDevices("", ()), "node"),
        (lambda: PodDevices("n", ((CardShare("u", 1, 1),),) * 300), "containers"),
        (lambda: PodDevices("n", (("u",),)), "containers[0][0]"),  # type: ignore[arg-type]
        (lambda: PodDevices("n", (), cpu_milli=-5), "cpu_milli"),
    ],
)
def test_a_decoders_output_is_checked(make: Any, field: str) -> None:
    with pytest.raises(RequestError) as err:
        make()
    assert err.value.field == field


def test_a_node_claiming_another_nodes_card_is_left_out() -> None:
    a = gpu_node("a", count=1)
    b = Node("b", 1000, 1024, (a.devices[0],))  # the same UUID a-gpu0
    view = view_with(b, a)
    with view.engine_locked() as engine:
        assert engine.state.node_names == ["a"]
        assert engine.state.uuid_slot == {"a-gpu0": 0}


def test_a_node_joining_keeps_the_workload_the_engine_learned() -> None:
    view = ClusterView(no_decoder, no_decoder)  # the default profile learns its workload
    view.on_node(node_event(EventType.ADDED, gpu_node("a", count=2)))
    with view.engine_locked() as engine:
        for i in range(3):
            engine.place(Request(f"r{i}", 1000, devices=DeviceRequest(count=1)))
        learned = engine._model(engine.profile).frag.workload
    view.on_node(node_event(EventType.ADDED, gpu_node("b", count=2)))
    with view.engine_locked() as rebuilt:
        assert rebuilt is not engine
        model = rebuilt._model(rebuilt.profile)
        assert [r.name for r in model.seen] == ["r0", "r1", "r2"]
        assert model.frag.workload.weights == learned.weights == (1.0,)


def test_allocation_ids_never_repeat_across_the_views_engines() -> None:
    """One counter per view, handed to every engine it builds (issue 43, item 3). Before, a pod's
    charge waiting for its node took an id from the view's counter that the engine did not know,
    and the engine handed the same id to the next placement (ids key preemption's victims)."""
    view = view_with(gpu_node("a", count=2))
    with view.engine_locked():
        pass
    view.on_pod(pod_event(EventType.ADDED, "p1", "b", [[("b-gpu0", 8 * GIB, 1000)]]))  # no b yet
    with view.engine_locked() as engine:
        view.reserve("p2", engine.place(one_gpu(8 * GIB)).allocations)
    view.on_node(node_event(EventType.ADDED, gpu_node("c", count=1)))  # the engine is rebuilt
    with view.engine_locked() as engine:
        view.reserve("p3", engine.place(one_gpu(8 * GIB)).allocations)
    ids = [a.id for allocs in view.charges().values() for a in allocs]
    assert len(ids) == len(set(ids)) == 3


# ---------------------------------------------------------------------- init containers (issue 56)
def hami_view(*nodes: dict[str, Any]) -> ClusterView:
    """A view with the extender's own decoders, fed Node and Pod objects as the watch delivers."""
    view = ClusterView(decode_node, decode_pod_devices, profile="binpack")
    for obj in nodes:
        view.on_node(Event(EventType.ADDED, obj["metadata"]["name"], "u", view.node_record(obj)))
    return view


def feed(view: ClusterView, kind: EventType, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    view.on_pod(Event(kind, key, meta["uid"], view.pod_record(obj)))


def test_a_hami_bound_init_container_pod_holds_the_larger_share_not_the_sum() -> None:
    """HAMi bound init 60000 MiB and app 40000 MiB to one 80 GB card (each fits alone). The view
    summed them, found 100000 MiB over the card and left the pod's whole charge out: the card
    looked free, running app container included (seen failing first: 81920 MiB free)."""
    view = hami_view(hami_node("n", cards=1))
    init, app = (
        container("init", gpu="1", gpumem="60000"),
        container("main", gpu="1", gpumem="40000"),
    )
    grants = [[("GPU-n-0", 60000, 0)], [("GPU-n-0", 40000, 0)]]
    pod = hami_pod("p", "n", init=[init], app=[app], grants=grants, init_states=[RUNNING])
    feed(view, EventType.ADDED, pod)
    assert free_mib(view, "GPU-n-0") == 81920 - 60000
    with view.engine_locked() as engine:
        assert int(engine.state.dev_task_free.reshape(-1)[0]) == 10 - 1  # one task, as HAMi
    # the init container succeeded: its card is no longer the pod's beyond the app's share
    done = hami_pod("p", "n", init=[init], app=[app], grants=grants, init_states=[DONE])
    feed(view, EventType.MODIFIED, done)
    assert free_mib(view, "GPU-n-0") == 81920 - 40000
    view.on_node(node_event(EventType.ADDED, gpu_node("other", count=1)))  # any rebuild
    assert free_mib(view, "GPU-n-0") == 81920 - 40000


def test_init_container_pods_rebuild_whatever_the_order() -> None:
    """xpupool -> HAMi -> xpupool: pods whose init container and app share a card, next to plain
    pods, are all charged in any order of events (before, which pod lost its charge depended on
    the order)."""
    init, app = (
        container("init", gpu="1", gpumem="50000"),
        container("main", gpu="1", gpumem="30000"),
    )
    pods = [
        hami_pod("a-plain", "n", app=[app], grants=[[("GPU-n-0", 30000, 0)]]),
        hami_pod("b-init", "n", [init], [app], [[("GPU-n-1", 50000, 0)], [("GPU-n-1", 30000, 0)]]),
        hami_pod("c-init", "n", [init], [app], [[("GPU-n-0", 50000, 0)], [("GPU-n-0", 30000, 0)]]),
    ]
    for order in (pods, pods[::-1]):
        view = hami_view(hami_node("n", cards=2))
        for obj in order:
            feed(view, EventType.ADDED, obj)
        assert (free_mib(view, "GPU-n-0"), free_mib(view, "GPU-n-1")) == (1920, 31920)


# ---------------------------------------------------------------------- assigned, not bound (issue 56)
def assigned(name: str, node: str, mib: int, phase: str = "Pending") -> dict[str, Any]:
    """A pod HAMi's scheduler assigned to ``node`` (its ``Filter`` wrote ``hami.io/vgpu-node`` and
    the device annotations) whose Binding has not landed: no ``spec.nodeName``."""
    pod = hami_pod(name, node, grants=[[(f"GPU-{node}-0", mib, 0)]])
    del pod["spec"]["nodeName"]
    pod["metadata"]["annotations"]["hami.io/bind-phase"] = "allocating"
    pod["status"]["phase"] = phase
    return pod


def test_a_pod_assigned_but_not_bound_is_charged_on_its_vgpu_node() -> None:
    """HAMi charges a pod from the moment its ``Filter`` annotated it (``onAddPod``: the
    ``hami.io/vgpu-node`` annotation and the decoded devices, whatever ``spec.nodeName`` says);
    the view charged nothing until the Binding landed (seen failing first: 81920 MiB free)."""
    view = hami_view(hami_node("n", cards=1))
    pod = assigned("p", "n", 60000)
    feed(view, EventType.ADDED, pod)
    assert free_mib(view, "GPU-n-0") == 81920 - 60000
    bound = hami_pod("p", "n", grants=[[("GPU-n-0", 60000, 0)]])
    feed(view, EventType.MODIFIED, bound)  # its Binding lands: the same charge, not two
    assert free_mib(view, "GPU-n-0") == 81920 - 60000
    feed(view, EventType.DELETED, bound)
    assert free_mib(view, "GPU-n-0") == 81920 and view.charges() == {}
    feed(view, EventType.ADDED, assigned("q", "n", 50000))
    feed(view, EventType.DELETED, assigned("q", "n", 50000))  # deleted before its Binding
    assert free_mib(view, "GPU-n-0") == 81920


def test_an_assignment_is_charged_no_longer_once_it_is_gone() -> None:
    """An assigned pod that finished, or whose assignment annotations were removed, holds
    nothing; one bound to another node than its ``hami.io/vgpu-node`` holds nothing on the node
    the annotation names."""
    view = hami_view(hami_node("n", cards=1), hami_node("m", cards=1))
    feed(view, EventType.ADDED, assigned("p", "n", 60000, phase="Failed"))
    assert free_mib(view, "GPU-n-0") == 81920
    feed(view, EventType.ADDED, assigned("q", "n", 60000))
    stripped = assigned("q", "n", 60000)
    stripped["metadata"]["annotations"] = {}
    feed(view, EventType.MODIFIED, stripped)
    assert free_mib(view, "GPU-n-0") == 81920 and view.charges() == {}
    elsewhere = assigned("r", "n", 60000)
    elsewhere["spec"]["nodeName"] = "m"  # someone else's Binding: it runs on m, not n
    feed(view, EventType.ADDED, elsewhere)
    assert (free_mib(view, "GPU-n-0"), free_mib(view, "GPU-m-0")) == (81920, 81920)
    assert view.charges() == {}


def test_a_released_hold_is_not_charged_again_from_the_pods_own_annotations() -> None:
    """A reservation whose annotations reached the pod stays a reservation until the Binding
    lands: a failed bind or a released gang gives it back, and the annotations still on the pod
    (until the extender strips them) do not charge it again. Charged from them, the pod held its
    cards until deleted: the reverted first attempt at charging assigned pods."""
    view = hami_view(hami_node("n", cards=1))
    with view.engine_locked() as engine:
        placement = engine.place(one_gpu(60000))
        view.reserve("uid-p", placement.allocations, name="ns/p")
    ann = assigned("p", "n", 60000)
    ann["metadata"]["annotations"][ALLOCATED] = "GPU-n-0,NVIDIA,60000,10:;"
    ann["metadata"]["annotations"][TO_ALLOCATE] = "GPU-n-0,NVIDIA,60000,10:;"
    feed(view, EventType.MODIFIED, ann)  # the bind's annotations arrive, the Binding does not
    assert free_mib(view, "GPU-n-0") == 81920 - 60000
    assert view.unreserve("uid-p")
    assert free_mib(view, "GPU-n-0") == 81920
    feed(view, EventType.MODIFIED, ann)  # a later event of the pod, annotations not yet stripped
    assert free_mib(view, "GPU-n-0") == 81920 and view.charges() == {}
    stripped = assigned("p", "n", 60000)
    stripped["metadata"]["annotations"] = {}
    feed(view, EventType.MODIFIED, stripped)
    feed(view, EventType.MODIFIED, assigned("p", "n", 20000))  # assigned anew: charged
    assert free_mib(view, "GPU-n-0") == 81920 - 20000


def test_filter_drops_a_pods_own_stale_assignment() -> None:
    """HAMi's ``Filter`` first takes the pod's own charge away (``TakeAndDeletePod``): a pod
    judged again must not be refused for what its own earlier assignment holds."""
    view = hami_view(hami_node("n", cards=1))
    feed(view, EventType.ADDED, assigned("p", "n", 60000))
    assert free_mib(view, "GPU-n-0") == 81920 - 60000
    assert not view.drop_assignment("uid-other")
    assert view.drop_assignment("uid-p")
    assert free_mib(view, "GPU-n-0") == 81920
    feed(view, EventType.MODIFIED, assigned("p", "n", 60000))  # the same stale annotations
    assert free_mib(view, "GPU-n-0") == 81920
    feed(view, EventType.MODIFIED, hami_pod("p", "n", grants=[[("GPU-n-0", 60000, 0)]]))
    assert free_mib(view, "GPU-n-0") == 81920 - 60000  # bound with them: charged
    assert not view.drop_assignment("uid-p")  # a bound pod's charge is never dropped


def test_a_released_hold_matches_its_annotations_whatever_their_rounding() -> None:
    """A bind writes compute in the device type's units, rounded up (Moore Threads: 188
    thousandths of a card become 3.008 sixteenths, written 4, read back as 250): the annotations
    of a hold given back name its cards with other amounts than the hold had, and still charge
    nothing. Seen failing first: the pod was charged 250 from them."""
    view = view_with(gpu_node("a", count=1))
    request = Request("p", 0, 0, DeviceRequest(count=1, memory_mib=8 * GIB, core_permille=188))
    with view.engine_locked() as engine:
        view.reserve("p1", engine.place(request).allocations)
    assert view.unreserve("p1")
    written = PodDevices("a", ((CardShare("a-gpu0", 8 * GIB, 250),),))
    view.on_pod(
        Event(EventType.MODIFIED, "default/p1", "p1", PodRecord("default/p1", None, 0, written))
    )
    assert free_mib(view, "a-gpu0") == 80 * GIB and view.charges() == {}
