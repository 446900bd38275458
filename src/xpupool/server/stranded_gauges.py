"""Stranded capacity as Prometheus gauges, per node: one form for every front that holds an engine
(the embedded server's ``/metrics`` and the Kubernetes extender's), so a dashboard built on one
reads the other. The measure is ``engine/fragmentation/stranded.py``'s: idle device memory and
compute that no shape of a target workload can use now. Each front passes the figure it already
shows elsewhere, so that its gauges and its other views agree: the server the fleet overview's
(``services/overview.py``: the pending jobs' shapes and the common ones; the dashboard reads the
same), the extender its engine's (the workload learned from the pods it placed). Issue 42: the
server's gauges used the engine's learned workload while its overview used the pending and
common shapes, so an idle pool showed 2,384 GiB stranded here and 0 there.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily

from xpupool.engine.fragmentation import Stranded

MIB = 1 << 20
MEMORY = "xpupool_node_stranded_device_memory_bytes"
CORES = "xpupool_node_stranded_device_cores"


def stranded_gauges(
    nodes: list[tuple[int, str, str]],
    stranded: Stranded | None,
    listed: Callable[[str], bool] = lambda name: True,
) -> list[GaugeMetricFamily]:
    """The two per-node gauges (labels ``node``, ``site``) for the live ``nodes`` (index, name,
    site: ``Engine.live_nodes``) that ``listed`` keeps, from ``stranded`` (per node index, as
    ``stranded_capacity`` gives it); none when there is no figure (no target workload yet). Call
    with the lock of the engine's owner held."""
    if stranded is None:
        return []
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
    for i, name, site in nodes:
        if not listed(name):
            continue
        memory.add_metric([name, site], int(stranded.memory_mib[i]) * MIB)
        cores.add_metric([name, site], int(stranded.core_milli[i]) / 1000)
    return [memory, cores]
