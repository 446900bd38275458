"""The Kubernetes extender reports stranded capacity: idle device memory and compute that no shape
of the workload its engine learned from the pods can use, per node, under the embedded server's
gauge names (``server/stranded_gauges.py``), read at scrape time from a real ClusterView and
engine (default profile) through the extender's registry."""

from __future__ import annotations

import re

from extender_kit import QuietApi, gpumem_pod, no_decoder
from prometheus_client import CollectorRegistry, generate_latest

from xpupool.k8s.extender.http_app import ExtenderMetrics, create_app
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node

MIB = 1 << 20
CARD_MIB = 81920


def gauges(registry: CollectorRegistry, name: str) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {
        node: float(value)
        for node, value in re.findall(rf'^{name}{{node="([^"]+)",site="[^"]*"}} (\S+)$', text, re.M)
    }


def test_the_extender_reports_each_nodes_stranded_capacity_once_it_has_learned_a_workload() -> None:
    view = ClusterView(no_decoder, no_decoder)
    for name in ("a", "b"):
        node = gpu_node(name, count=1, memory_mib=CARD_MIB, group_size=0)
        view.on_node(Event(EventType.ADDED, name, f"uid-{name}", NodeRecord(node, True)))
    api = QuietApi()
    ext = Extender(view, api, lambda node, demand, allocs: {})
    registry = CollectorRegistry()
    metrics = ExtenderMetrics(registry)
    create_app(ext, lambda timeout: True, metrics)
    memory = "xpupool_node_stranded_device_memory_bytes"
    assert gauges(registry, memory) == {}  # nothing learned yet: no workload to strand for

    big = gpumem_pod("big", 60000)
    api.add(big)
    [node] = ext.filter(ExtenderArgs(Pod=big, NodeNames=["a", "b"])).node_names or []
    meta = big["metadata"]
    bound = ext.bind(
        ExtenderBindingArgs(PodName="big", PodNamespace="ns", PodUID=meta["uid"], Node=node)
    )
    assert not bound.error
    other = "b" if node == "a" else "a"
    # The workload learned is one shape, 60,000 MiB of a card: the 21,920 MiB left beside the
    # pod can take none of it; the empty card strands nothing.
    assert gauges(registry, memory) == {node: (CARD_MIB - 60000) * MIB, other: 0.0}
    cores = gauges(registry, "xpupool_node_stranded_device_cores")
    assert cores[other] == 0.0 and 0.0 < cores[node] <= 1.0
    text = generate_latest(registry).decode()
    assert "xpupool_extender_nodes 2.0" in text and "xpupool_extender_pods_charged 1.0" in text
