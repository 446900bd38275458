"""Plain builders for nodes, clusters and requests used across tests (no fixtures magic)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.engine import ClusterState, Engine
from xpupool.model import Device, DeviceRequest, Node, Request

A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"
A10 = "NVIDIA A10"
ASCEND_910B3 = "910B3"


def gpu_node(
    name: str,
    *,
    model: str = A100,
    vendor: str = "nvidia",
    count: int = 8,
    memory_mib: int = 81920,
    driver: str | None = "550.54.15",
    group_size: int = 4,
    cpu_milli: int = 64_000,
    memory_node_mib: int = 512 * 1024,
    site: str = "default",
    healthy: bool = True,
    max_tasks: int | None = None,
) -> Node:
    """A node of ``count`` identical cards; ``group_size`` cards per link group (0 = PCIe only)."""
    devices = tuple(
        Device(
            uuid=f"{name}-gpu{j}",
            vendor=vendor,
            model=model,
            memory_mib=memory_mib,
            index=j,
            driver_version=driver,
            link_group=None if group_size == 0 else f"link{j // group_size}",
            healthy=healthy,
            max_tasks=max_tasks,
        )
        for j in range(count)
    )
    return Node(name, cpu_milli, memory_node_mib, devices, site=site)


def cpu_node(name: str, cpu_milli: int = 32_000, memory_mib: int = 128 * 1024) -> Node:
    return Node(name, cpu_milli, memory_mib)


def engine_for(*nodes: Node, profile: str = "binpack", seed: int = 0) -> Engine:
    return Engine(ClusterState(nodes, seed=seed), profile, seed=seed)


def devices(count: int = 1, **kwargs: object) -> Request:
    """A one-replica request for ``count`` devices; kwargs go to DeviceRequest."""
    return Request("job", 1000, 1024, DeviceRequest(count=count, **kwargs))  # type: ignore[arg-type]


def tiny_trace(
    folder: Path,
    nodes: int = 10,
    gpus: int = 4,
    pods: int = 60,
    shares: tuple[int, ...] = (250, 500, 1000),
) -> tuple[str, str]:
    """An Alibaba-format trace in ``folder`` (nodes.csv, pods.csv): ``nodes`` T4 nodes of
    ``gpus`` cards and ``pods`` one-card pods cycling through ``shares`` (thousandths of a card),
    so that a replay takes a fraction of a second. Returns the two paths as strings."""
    node_csv = folder / "nodes.csv"
    node_csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,65536,{gpus},T4\n" for i in range(nodes))
    )
    pod_csv = folder / "pods.csv"
    pod_csv.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(f"p{i},2000,1024,1,{shares[i % len(shares)]},\n" for i in range(pods))
    )
    return str(node_csv), str(pod_csv)


# What a state keeps that changes on every allocation change without being capacity: a release
# restores everything else bit for bit.
CHANGE_RECORDS = ("node_version", "_changes")


def capacity_arrays(state: ClusterState) -> dict[str, np.ndarray]:
    """Copies of the state's arrays that a release must restore bit for bit."""
    return {
        k: v.copy()
        for k, v in vars(state).items()
        if isinstance(v, np.ndarray) and k not in CHANGE_RECORDS
    }


def partition_scheme(model: str) -> PartitionScheme:
    """The packaged partition scheme of ``model`` (the test fails if it has none)."""
    found = load_partitions().scheme_for(model)
    assert found is not None, model
    return found
