"""HAMi's MIG annotations on a real kube-apiserver and kube-scheduler (issue 53): a kwok Node whose
node agent declared an A100-40GB cut into two ``3g.20gb`` instances (``xpupool.io/devices``), and
pods asking as HAMi's examples do: ``nvidia.com/mig-3g.20gb: 1`` (examples/nvidia/
mig_example.yaml) and ``nvidia.com/vgpu-mode: mig`` with ``nvidia.com/gpumem``
(dynamic_mig_example.yaml). Each bound pod carries HAMi's reservation of its instance
(``hami.io/vgpu-mig-allocations``: card, profile, placement) and its card with the profile's
memory and cores in ``hami.io/vgpu-devices-allocated``; no two pods get one instance, and a pod
beyond the instances waits with the extender's reason. Nothing runs a kubelet.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import ExtenderProcess, K8sCluster, extender_stack, free_port
from test_extender_e2e import (
    MANAGED,
    add_nodes,
    bound,
    create,
    delete_pods,
    every_verb,
    gpu_pod,
    hami_node,
    reasons,
    remove_nodes,
    shares,
)
from test_hami_policies_e2e import unbound_for

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card
from xpupool.k8s.codec.node_annotations import DEVICES_KEY, encode_devices
from xpupool.model import Device
from xpupool.server.schemas.agent_protocol import DeviceIn

pytestmark = pytest.mark.k8s

PROFILE = "nvidia.com/mig-3g.20gb"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    """The chart's managed resources plus the MIG name the pods use (docs/kubernetes.md)."""
    port = free_port()
    ext = dataclasses.replace(every_verb(port), managed_resources=(*MANAGED, PROFILE))
    with extender_stack(tmp_path_factory.mktemp("partitions"), port, ext) as both:
        yield both


def mig_node(name: str) -> dict[str, Any]:
    """A Node whose agent declared card ``GPU-<name>-0`` cut 3g.20gb at 0 and at 4 (its devices
    annotation is read in place of HAMi's registration)."""
    card = Device(f"GPU-{name}-0", "nvidia", "A100-SXM4-40GB", 40960)
    layout = (("3g.20gb", 0), ("3g.20gb", 4))
    instances = cut_card(card, layout, load_partitions(), load_accelerators())
    node = hami_node(name, ("NVIDIA A100-SXM4-40GB", 40960), 1)
    declared = encode_devices(DeviceIn.from_device(d) for d in instances)
    node["metadata"]["annotations"] = {DEVICES_KEY: declared}
    return node


def test_mig_pods_take_distinct_instances_reserved_as_hami_reserves_them(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    add_nodes(kc, mig_node("mig-a"))
    try:
        by_memory = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}
        create(
            kc,
            gpu_pod("by-name", {PROFILE: "1"}),
            gpu_pod("by-memory", by_memory, {"nvidia.com/vgpu-mode": "mig"}),
        )
        pods = bound(kc, ["by-name", "by-memory"])
        starts = set()
        for p in pods.values():
            (reserved,) = json.loads(p["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
            assert (reserved["gpuUUID"], reserved["profile"]) == ("GPU-mig-a-0", "3g.20gb")
            assert reserved["placement"]["size"] == 4
            starts.add(reserved["placement"]["start"])
            assert shares(p) == [("GPU-mig-a-0", 20480, 43)]
        assert starts == {0, 4}
        create(kc, gpu_pod("third", {PROFILE: "1"}))
        why = reasons(kc, "third")
        assert "xpupool:" in why, why
        unbound_for(kc, ["third"], 3)
    finally:
        delete_pods(kc)
        remove_nodes(kc, "mig-a")
