"""What the extender's bind checks before it writes anything (issue 43, item 10): its port has
no authentication unless the operator adds it, so ``/bind`` and ``/filter`` may come from anyone.

A bind writes (annotations, Binding) only for a pod that, as the apiserver holds it, names a
managed resource; on a Node the view has listed; where the engine holds the pod's containers
now. Before, a pod of kube-system asking for nothing was bound to any node named, and a filter
body claiming devices the pod does not ask for made its bind go through.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from extender_kit import ApiPods, gpumem_pod, no_decoder

from xpupool.k8s.codec.pod_request import PodDemand, names_managed_resource
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model.allocation import Allocation

from factories import gpu_node

CARD_MIB = 81920


class WritingApi(ApiPods):
    """Holds pods; records every write a bind makes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str, str]] = []

    def annotate_pod(self, namespace: str, name: str, *args: object) -> None:
        self.writes.append(("annotate", name, ""))

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.writes.append(("bind", name, node))


class Kit:
    """A view of two nodes, ``big`` (one 80 GiB card) and ``small`` (one 16 GiB card), a node
    ``cpu-only`` the view lists outside the pool, and the extender over them."""

    def __init__(self) -> None:
        self.view = ClusterView(no_decoder, no_decoder)
        nodes = {
            "big": gpu_node("big", count=1, group_size=0),
            "small": gpu_node("small", count=1, memory_mib=16384, group_size=0),
            "cpu-only": None,
        }
        for name, node in nodes.items():
            self.view.on_node(Event(EventType.ADDED, name, f"uid-{name}", NodeRecord(node, True)))
        self.api = WritingApi()
        self.annotated: list[Sequence[Allocation]] = []
        self.ext = Extender(self.view, self.api, self.annotate)

    def annotate(
        self, node: str, demand: PodDemand, placed: Sequence[Allocation]
    ) -> dict[str, str]:
        self.annotated.append(placed)
        return {}

    def filter(self, pod: dict[str, Any], nodes: Sequence[str] = ("big", "small")) -> list[str]:
        return list(self.ext.filter(ExtenderArgs(Pod=pod, NodeNames=list(nodes))).node_names or [])

    def bind(self, pod: dict[str, Any], node: str) -> str:
        meta = pod["metadata"]
        args = ExtenderBindingArgs(
            PodName=meta["name"], PodNamespace=meta["namespace"], PodUID=meta["uid"], Node=node
        )
        return self.ext.bind(args).error


def plain_pod(name: str, namespace: str = "kube-system") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "7"}
    return {"metadata": meta, "spec": {"containers": [{"name": "main"}]}}


def with_limits(pod: dict[str, Any], limits: dict[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0]["resources"] = {"limits": limits}
    return out


def test_a_pod_that_asks_for_no_managed_resource_is_never_bound() -> None:
    kit = Kit()
    dns = plain_pod("coredns")
    kit.api.add(dns)
    for node in ("big", "cpu-only", "nowhere"):
        assert "asks for no resource xpupool manages" in kit.bind(dns, node)
    assert kit.api.writes == []


def test_a_node_the_view_has_not_listed_is_refused_writing_nothing() -> None:
    kit = Kit()
    pod = gpumem_pod("p", 8000)
    kit.api.add(pod)
    assert kit.filter(pod) == ["big"]
    error = kit.bind(pod, "nowhere")
    assert "nowhere is not a Node of the cluster" in error
    assert kit.api.writes == []
    assert kit.view.reservation("uid-p") is not None  # filter's hold on big stays for its bind
    assert kit.bind(pod, "big") == ""


def test_a_node_the_filter_refused_for_the_pod_is_refused_writing_nothing() -> None:
    kit = Kit()
    pod = gpumem_pod("p", 40000)  # more than small's card holds
    kit.api.add(pod)
    assert kit.filter(pod) == ["big"]
    for node in ("small", "cpu-only"):
        error = kit.bind(pod, node)
        assert error.startswith(f"xpupool: {node}: "), error
    assert kit.api.writes == []
    assert kit.view.reservation("uid-p") is None  # its hold went with the refused bind
    assert kit.bind(pod, "big") == ""
    assert kit.api.writes == [("annotate", "p", ""), ("bind", "p", "big")]


def test_a_filter_body_claiming_devices_the_pod_does_not_ask_for_binds_nothing() -> None:
    kit = Kit()
    dns = plain_pod("coredns")
    kit.api.add(dns)
    forged = with_limits(dns, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    assert kit.filter(forged) == ["big"]  # filter judges the body it is sent
    assert "asks for no resource xpupool manages" in kit.bind(dns, "big")
    assert kit.api.writes == []


def test_a_hold_made_for_a_forged_demand_is_not_what_the_pod_is_given() -> None:
    """A filter body claiming 1,000 MiB for a pod that asks the apiserver for 60,000: the bind
    places the 60,000 the pod asks, not the forged hold, and later filters read it so."""
    kit = Kit()
    pod = gpumem_pod("p", 60000)
    kit.api.add(pod)
    forged = with_limits(pod, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    assert kit.filter(forged) == ["big"]
    assert kit.bind(pod, "big") == ""
    [placed] = kit.annotated
    assert [d.memory_mib for a in placed for d in a.devices] == [60000]
    other = gpumem_pod("q", 21000)  # fits the 21,920 MiB left on big only if no hold is left
    assert kit.filter(other) == ["big"]


def test_a_pod_naming_a_managed_resource_with_a_count_of_zero_binds_without_devices() -> None:
    """kube-scheduler sends it (its managedResources test looks at names, not amounts): bound
    where asked if the view knows the node, and no card is charged."""
    kit = Kit()
    pod = with_limits(plain_pod("zero", "ns"), {"nvidia.com/gpu": "0"})
    kit.api.add(pod)
    assert "nowhere is not a Node" in kit.bind(pod, "nowhere")
    assert kit.bind(pod, "cpu-only") == ""
    assert kit.api.writes == [("bind", "zero", "cpu-only")]
    assert kit.view.reservation("uid-zero") is None


def test_names_managed_resource_is_kube_schedulers_interest_test() -> None:
    pod = plain_pod("p")
    assert not names_managed_resource(pod)
    assert names_managed_resource(with_limits(pod, {"nvidia.com/gpu": "0"}))
    requested = copy.deepcopy(pod)
    requested["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"nvidia.com/gpumem": "10"}}}
    ]
    assert names_managed_resource(requested)
    assert not names_managed_resource(with_limits(pod, {"example.com/fpga": "1", "cpu": "1"}))
    for bad in (
        None,
        [],
        {"spec": []},
        {"spec": {"containers": "x"}},
        {"spec": {"containers": [1]}},
    ):
        assert not names_managed_resource(bad)
