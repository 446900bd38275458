"""A bind that does not happen leaves no assignment behind (issue 56). A bind writes HAMi's
assignment annotations (``hami.io/vgpu-node``, the device annotations, ``bind-phase``) before it
posts the Binding, and a gang member writes them before it waits for the rest of its group. HAMi's
scheduler charges every pod that carries ``hami.io/vgpu-node`` and its device annotations, bound or
not (v2.10.0 ``scheduler.go`` ``onAddPod``), and so does the cluster view: left on a pod whose
Binding never landed, they charge its cards to nobody's benefit until the pod is deleted. A failed
bind and a released gang therefore strip what they wrote, unless the pod turns out to be bound."""

from __future__ import annotations

import copy
from typing import Any

from extender_kit import ApiPods, gpumem_pod
from hami_objects import ALLOCATED, hami_node

from xpupool.k8s.codec.pod_assignment import assignment_annotations
from xpupool.k8s.extender.gang import Gangs
from xpupool.k8s.extender.verbs import BindError, Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.decoders import decode_node, decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType

VGPU_NODE = "hami.io/vgpu-node"


class PatchingApi(ApiPods):
    """An apiserver's pods that take JSON merge patches of annotations (None removes a key), each
    guarded by its resourceVersion, and Bindings that fail (``refuse``) or land though the call
    fails (``lands``). ``seen`` keeps every version the patches made, as a watch delivers them."""

    def __init__(self, *pods: dict[str, Any], refuse: bool = True, lands: bool = False) -> None:
        super().__init__(*pods)
        self.refuse = refuse
        self.lands = lands
        self.seen: list[dict[str, Any]] = []

    def annotate_pod(
        self, namespace: str, name: str, resource_version: str, annotations: dict[str, Any]
    ) -> None:
        pod = self.pods[(namespace, name)]
        meta = pod["metadata"]
        if resource_version and resource_version != meta["resourceVersion"]:
            raise BindError(f"annotating pod {namespace}/{name}: 409 Conflict")
        held = meta.setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                held.pop(key, None)
            else:
                held[key] = value
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.seen.append(copy.deepcopy(pod))

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.lands:
            self.pods[(namespace, name)]["spec"]["nodeName"] = node
        if self.refuse:
            raise BindError(f"binding pod {namespace}/{name} to {node}: 500 Internal Error")
        self.pods[(namespace, name)]["spec"]["nodeName"] = node


def hami_view() -> ClusterView:
    """One node ``n`` with one A100 80 GB that HAMi's device plugin registered."""
    view = ClusterView(decode_node, decode_pod_devices, profile="binpack")
    node = hami_node("n", cards=1)
    view.on_node(Event(EventType.ADDED, "n", "uid-n", view.node_record(node)))
    return view


def feed(view: ClusterView, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    view.on_pod(Event(EventType.MODIFIED, key, meta["uid"], view.pod_record(obj)))


def free_mib(view: ClusterView) -> int:
    with view.engine_locked() as engine:
        return int(engine.state.dev_mem_free.reshape(-1)[0])


def bind(ext: Extender, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    got = ext.filter(ExtenderArgs(Pod=pod, NodeNames=["n"]))
    assert got.node_names == ["n"], got
    args = ExtenderBindingArgs(
        PodName=meta["name"], PodNamespace=meta["namespace"], PodUID=meta["uid"], Node="n"
    )
    return ext.bind(args).error


def test_a_refused_binding_strips_the_assignment_its_bind_wrote() -> None:
    """Seen failing first: the annotations stayed (``hami.io/vgpu-node: n`` on a pod never
    bound), so HAMi's scheduler charged 60000 MiB of the card to it until it was deleted."""
    view = hami_view()
    pod = gpumem_pod("p", 60000)
    api = PatchingApi(pod)
    ext = Extender(view, api, assignment_annotations)
    assert "500 Internal Error" in bind(ext, pod)
    written = api.seen[0]["metadata"]["annotations"]
    assert written[VGPU_NODE] == "n" and ALLOCATED in written
    assert api.get_pod("ns", "p")["metadata"]["annotations"] == {}
    for version in api.seen:  # what the watch brings after the bind, stale versions first
        feed(view, version)
    assert free_mib(view) == 81920 and view.charges() == {}


def test_a_binding_that_landed_though_the_call_failed_keeps_its_assignment() -> None:
    """The pod is bound after all: its annotations are what the device plugin serves it from."""
    view = hami_view()
    pod = gpumem_pod("p", 60000)
    api = PatchingApi(pod, lands=True)
    ext = Extender(view, api, assignment_annotations)
    assert bind(ext, pod)
    assert api.get_pod("ns", "p")["metadata"]["annotations"][VGPU_NODE] == "n"


def test_a_released_gang_strips_its_members_assignments() -> None:
    """A group of two whose second member never comes: the first member's bind annotated its pod,
    waited, and gave its place back. Seen failing first: its annotations stayed on the pod."""
    view = hami_view()
    pod = gpumem_pod("m0", 30000)
    pod["metadata"]["annotations"] = {"xpupool.io/gang": "g", "xpupool.io/gang-size": "2"}
    api = PatchingApi(pod, refuse=False)
    ext = Extender(view, api, assignment_annotations, Gangs(view, wait_s=0.2))
    why = bind(ext, pod)
    assert "1 of 2 members reached bind" in why, why
    annotations = api.get_pod("ns", "m0")["metadata"]["annotations"]
    assert VGPU_NODE not in annotations and ALLOCATED not in annotations
    assert annotations["xpupool.io/gang"] == "g"  # the pod's own annotations stay
    for version in api.seen:
        feed(view, version)
    assert free_mib(view) == 81920 and view.charges() == {}


def test_filter_does_not_count_a_pods_own_stale_assignment_against_it() -> None:
    """Annotations a failed bind could not strip (the API down, the extender restarted) charge
    the pod, as HAMi charges them, until the pod is filtered again: then they are dead, as HAMi's
    ``Filter`` drops the pod's own charge first, and the pod fits where they were."""
    view = hami_view()
    pod = gpumem_pod("p", 60000)
    stale = copy.deepcopy(pod)
    stale["metadata"]["annotations"] = {
        VGPU_NODE: "n",
        ALLOCATED: "GPU-n-0,NVIDIA,60000,0:;",
        "hami.io/vgpu-devices-to-allocate": "GPU-n-0,NVIDIA,60000,0:;",
    }
    feed(view, stale)
    assert free_mib(view) == 81920 - 60000
    api = PatchingApi(stale, refuse=False)
    ext = Extender(view, api, assignment_annotations)
    assert bind(ext, stale) == ""
    assert free_mib(view) == 81920 - 60000  # its reservation, not two charges
    bound = api.get_pod("ns", "p")
    feed(view, bound)
    assert free_mib(view) == 81920 - 60000
    assert bound["metadata"]["annotations"][ALLOCATED].startswith("GPU-n-0,NVIDIA,60000,")


def test_a_bind_without_its_filter_replaces_a_stale_assignment() -> None:
    """A bind this view did not filter for (a new leader, an extender restarted in between) of a
    pod that still carries an assignment a failed bind could not strip: that assignment is dead,
    the bind's placement is the pod's charge. Seen failing first, once the view charged assigned
    pods: ``Conflict: pod uid-p already holds devices`` raised out of bind."""
    view = hami_view()
    stale = gpumem_pod("p", 10000)
    stale["metadata"]["annotations"] = {VGPU_NODE: "n", ALLOCATED: "GPU-n-0,NVIDIA,60000,0:;"}
    feed(view, stale)
    assert free_mib(view) == 81920 - 60000
    api = PatchingApi(stale, refuse=False)
    ext = Extender(view, api, assignment_annotations)
    args = ExtenderBindingArgs(PodName="p", PodNamespace="ns", PodUID="uid-p", Node="n")
    assert ext.bind(args).error == ""
    feed(view, api.get_pod("ns", "p"))
    assert free_mib(view) == 81920 - 10000


def test_a_pod_deleted_between_its_filter_and_its_bind_gives_its_hold_back() -> None:
    """kube-scheduler filtered a pod from its cache after the pod was deleted (its informer is
    behind the apiserver): filter held 60000 MiB for it, and the bind finds the pod gone. Seen
    failing first (in e2e, as a pod refused for a minute beside a card with room): the hold
    stayed until it lapsed, 30 s, and kube-scheduler does not try its unschedulable pods again
    when a hold lapses."""
    view = hami_view()
    pod = gpumem_pod("gone", 60000)
    api = PatchingApi(pod, refuse=False)
    ext = Extender(view, api, assignment_annotations)
    got = ext.filter(ExtenderArgs(Pod=pod, NodeNames=["n"]))
    assert got.node_names == ["n"], got
    assert free_mib(view) == 81920 - 60000  # filter's hold
    del api.pods[("ns", "gone")]  # deleted; the view saw no event for it after the hold
    args = ExtenderBindingArgs(PodName="gone", PodNamespace="ns", PodUID="uid-gone", Node="n")
    assert "404" in ext.bind(args).error
    assert free_mib(view) == 81920 and view.charges() == {}
    api.add(gpumem_pod("gone", 60000))  # a new pod by that name: another UID's hold is not its own
    other = gpumem_pod("gone", 60000)
    other["metadata"]["uid"] = "uid-new"
    got = ext.filter(ExtenderArgs(Pod=other, NodeNames=["n"]))
    assert free_mib(view) == 81920 - 60000
    args = ExtenderBindingArgs(PodName="gone", PodNamespace="ns", PodUID="uid-new", Node="n")
    assert "is not uid-new any more" in ext.bind(args).error
    assert free_mib(view) == 81920
