"""Stranded capacity as Prometheus gauges, per node: one form for every front that holds an engine
(the embedded server's ``/metrics`` and the Kubernetes extender's), so a dashboard built on one
reads the other. The figure is the engine's (``Engine.stranded``, ``fragmentation/stranded.py``):
idle device memory and compute that no shape of the target workload can use now.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily

from xpupool.engine import Engine

MIB = 1 << 20
MEMORY = "xpupool_node_stranded_device_memory_bytes"
CORES = "xpupool_node_stranded_device_cores"


def stranded_gauges(
    engine: Engine, listed: Callable[[str], bool] = lambda name: True
) -> list[GaugeMetricFamily]:
    """The two per-node gauges (labels ``node``, ``site``) for the engine's live nodes that
    ``listed`` keeps; none until the engine has a target workload (given or learned). Call with
    the engine's owner's lock held: it reads the state once over every node."""
    stranded = engine.stranded()
    if stranded is None:
        return []
    state = engine.state
    memory = GaugeMetricFamily(
        MEMORY,
        "Idle device memory on the node that no shape of the target workload can use now.",
        labels=["node", "site"],
    )
    cores = GaugeMetricFamily(
        CORES,
        "Idle device compute on the node, in cards, that no shape of the target workload can "
        "use now.",
        labels=["node", "site"],
    )
    for i, name in enumerate(state.node_names):
        if not state.node_alive[i] or not listed(name):
            continue
        site = state.nodes[i].site
        memory.add_metric([name, site], int(stranded.memory_mib[i]) * MIB)
        cores.add_metric([name, site], int(stranded.core_milli[i]) / 1000)
    return [memory, cores]
