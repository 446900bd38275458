"""A pod's init containers placed as HAMi places them (issue 56): each init container alone against
the node as it is, the app containers together, and the pod charged per card the larger of the
two (``pod_charge.py``), so init and app containers may share a card that holds only one of them at
a time. On a real ClusterView and engine, with the extender's own decoders and annotations."""

from __future__ import annotations

from typing import Any

from extender_kit import ApiPods
from hami_objects import ALLOCATED, H100, container, hami_node, hami_pod

from xpupool.k8s.codec import hami
from xpupool.k8s.codec.pod_assignment import assignment_annotations
from xpupool.k8s.extender.gang import GANG_ANNOTATION, GANG_SIZE_ANNOTATION, Gangs
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.decoders import decode_node, decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType

CARD_MIB = H100[1]


class AnnotatingApi(ApiPods):
    """Binds without an apiserver and keeps what each bind wrote on its pod."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, dict[str, str]] = {}

    def annotate_pod(self, ns: str, name: str, rv: str, annotations: dict[str, str]) -> None:
        self.written[name] = dict(annotations)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        pass


def stack(*nodes: dict[str, Any]) -> tuple[ClusterView, Extender, AnnotatingApi]:
    view = ClusterView(decode_node, decode_pod_devices, profile="binpack")
    for obj in nodes:
        view.on_node(Event(EventType.ADDED, obj["metadata"]["name"], "u", view.node_record(obj)))
    api = AnnotatingApi()
    return view, Extender(view, api, assignment_annotations, Gangs(view)), api


def share_pod(
    name: str, init_pct: int, app_pct: int, pin: str | None = None, **more: str
) -> dict[str, Any]:
    """Init and app containers of one card each, ``*_pct`` % of its memory and compute."""

    def part(ctr: str, pct: int) -> dict[str, Any]:
        return container(ctr, gpu="1", gpumem_percentage=str(pct), gpucores=str(pct))

    annotations = {"nvidia.com/use-gpuuuid": pin} if pin else {}
    annotations.update(more)
    init = [part("init", init_pct)] if init_pct else []
    return hami_pod(name, None, init, [part("main", app_pct)], annotations=annotations)


def filter_bind(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> str:
    """Filter then bind to the node it answered: "" when bound, else why not. The pod is in the
    API first: bind reads it from there."""
    ext.api.add(pod)
    found = ext.filter(ExtenderArgs(Pod=pod, NodeNames=nodes))
    if not found.node_names:
        return f"{found.error} {found.failed_nodes} {found.failed_and_unresolvable_nodes}"
    meta = pod["metadata"]
    args = ExtenderBindingArgs(
        PodName=meta["name"], PodNamespace="ns", PodUID=meta["uid"], Node=found.node_names[0]
    )
    return ext.bind(args).error


def free(view: ClusterView, uuid: str) -> tuple[int, int, int]:
    with view.engine_locked() as engine:
        s = engine.state
        slot = s.uuid_slot[uuid]
        return (
            int(s.dev_mem_free.reshape(-1)[slot]),
            int(s.dev_core_free.reshape(-1)[slot]),
            int(s.dev_task_free.reshape(-1)[slot]),
        )


def test_init_and_app_of_sixty_percent_share_one_pinned_card() -> None:
    """HAMi binds init 60 % + app 60 % pinned to one H100; xpupool placed the two as separate
    allocations and kept the pod Pending (seen failing first: "device UUID not allowed")."""
    view, ext, api = stack(hami_node("h", cards=2, model=H100))
    assert filter_bind(ext, share_pod("p", 60, 60, pin="GPU-h-0"), ["h"]) == ""
    written = api.written["p"]
    # HAMi's annotation, init container first, each container its own share of the one card
    share = f"GPU-h-0,NVIDIA,{CARD_MIB * 60 // 100},60:"
    assert written[ALLOCATED] == f"{share};{share};"
    assert free(view, "GPU-h-0") == (CARD_MIB - CARD_MIB * 60 // 100, 400, 9)  # 60 %, one task
    assert free(view, "GPU-h-1") == (CARD_MIB, 1000, 10)
    # the charge is 60 %: 50 % more does not fit, 40 % does
    assert "xpupool" in filter_bind(ext, share_pod("over", 0, 50, pin="GPU-h-0"), ["h"])
    assert filter_bind(ext, share_pod("fits", 0, 40, pin="GPU-h-0"), ["h"]) == ""


def test_the_bound_pod_arriving_keeps_its_charge_and_a_restart_rebuilds_it() -> None:
    view, ext, api = stack(hami_node("h", cards=1, model=H100))
    pod = share_pod("p", 70, 30)
    assert filter_bind(ext, pod, ["h"]) == ""
    held = free(view, "GPU-h-0")
    assert held[:2] == (CARD_MIB - CARD_MIB * 70 // 100, 300)
    pod["metadata"]["annotations"].update(api.written["p"])
    pod["spec"]["nodeName"] = "h"
    event = Event(EventType.MODIFIED, "ns/p", pod["metadata"]["uid"], view.pod_record(pod))
    view.on_pod(event)  # the watch brings the bound pod: the same charge, not a second one
    assert free(view, "GPU-h-0") == held
    fresh, _, _ = stack(hami_node("h", cards=1, model=H100))  # a restarted extender
    fresh.on_pod(Event(EventType.ADDED, "ns/p", pod["metadata"]["uid"], fresh.pod_record(pod)))
    assert free(fresh, "GPU-h-0") == held


def test_an_init_container_and_an_app_on_two_cards_hold_each_alone() -> None:
    """Whole cards: the init container and the app are each placed against the node before the
    pod, so on a node of one free card both take it, one after the other."""
    view, ext, api = stack(hami_node("h", cards=1, model=H100))
    pod = hami_pod("p", None, [container("init", gpu="1")], [container("main", gpu="1")])
    assert filter_bind(ext, pod, ["h"]) == ""
    assert api.written["p"][ALLOCATED] == f"GPU-h-0,NVIDIA,{CARD_MIB},100:;" * 2
    assert free(view, "GPU-h-0") == (0, 0, 9)


def test_a_gang_member_with_an_init_container() -> None:
    """A gang's places hold each member's init container and app on one card, as a lone pod's."""
    view, ext, _ = stack(hami_node("h", cards=2, model=H100))
    gang = {GANG_ANNOTATION: "g", GANG_SIZE_ANNOTATION: "2"}
    members = [share_pod(f"m{i}", 60, 60, **gang) for i in range(2)]
    answers = [ext.filter(ExtenderArgs(Pod=m, NodeNames=["h"])) for m in members]
    assert [a.node_names for a in answers] == [["h"], ["h"]], answers
    assert (
        free(view, "GPU-h-0")[:2]
        == free(view, "GPU-h-1")[:2]
        == (
            CARD_MIB - CARD_MIB * 60 // 100,
            400,
        )
    )


def test_what_a_bind_writes_is_what_hami_decodes() -> None:
    _, ext, api = stack(hami_node("h", cards=1, model=H100))
    assert filter_bind(ext, share_pod("p", 50, 20), ["h"]) == ""
    ((_, decoded),) = hami.pod_assignment(api.written["p"])
    assert [[(d.uuid, d.used_cores) for d in c] for c in decoded] == [
        [("GPU-h-0", 50)],
        [("GPU-h-0", 20)],
    ]


def test_a_sidecar_runs_beside_the_init_containers_after_it_and_the_app() -> None:
    """A sidecar (``restartPolicy: Always``) is no init container that ends: sidecar 30 % then
    init 50 % then app 30 % on one pinned card fit (30 + 50 while initialising, 30 + 30 after)
    and hold 80 %, two tasks; sidecar 60 % and app 60 % never fit one card together."""
    view, ext, _ = stack(hami_node("h", cards=1, model=H100))

    def part(name: str, pct: int, sidecar: bool = False) -> dict[str, Any]:
        limits = {"gpu": "1", "gpumem_percentage": str(pct), "gpucores": str(pct)}
        return container(name, sidecar=sidecar, **limits)

    pin = {"nvidia.com/use-gpuuuid": "GPU-h-0"}
    pod = hami_pod("p", None, [part("side", 30, True), part("init", 50)], [part("main", 30)])
    pod["metadata"]["annotations"].update(pin)
    assert filter_bind(ext, pod, ["h"]) == ""
    assert free(view, "GPU-h-0") == (CARD_MIB - CARD_MIB * 80 // 100, 200, 8)
    both = hami_pod("q", None, [part("side", 60, True)], [part("main", 60)])
    both["metadata"]["annotations"].update(pin)
    _, ext, _ = stack(hami_node("h", cards=1, model=H100))  # a fresh cluster
    assert "xpupool" in filter_bind(ext, both, ["h"])
