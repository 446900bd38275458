"""Pods assigned but not yet bound (issue 56), behind a real kube-scheduler (v1.36) on a real
kube-apiserver with xpupool's extender.

HAMi's scheduler charges a pod from the moment its ``Filter`` writes ``hami.io/vgpu-node`` and the
device annotations, before the Binding lands (HAMi v2.10.0 ``pkg/scheduler/scheduler.go``
``onAddPod``, commit 4707fb02c91c). The extender charged nothing until ``spec.nodeName`` was set,
so while HAMi's scheduler ran beside it, a card HAMi had just assigned looked free. Charging such
pods needs the extender's own failed binds to leave no assignment behind: a gang member writes its
annotations before it waits for its group, and when the group is released those annotations, left
on the pod, would charge its card (in HAMi, in a restarted extender) until the pod is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import ExtenderProcess, K8sCluster, extender_stack, free_port
from test_extender_e2e import (
    A100,
    NS,
    add_nodes,
    bound,
    create,
    delete_pods,
    every_verb,
    gpu_pod,
    hami_node,
    pod,
    reasons,
    refused,
    remove_nodes,
    shares,
)

pytestmark = pytest.mark.k8s

GANG_WAIT_S = 3.0
VGPU_NODE = "hami.io/vgpu-node"
ALLOCATED = "hami.io/vgpu-devices-allocated"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    ext = every_verb(port, preempt=False)
    extra = ("--gang-wait", str(GANG_WAIT_S))
    with extender_stack(tmp_path_factory.mktemp("assigned"), port, ext, extra) as both:
        yield both


def hami_assigns(kc: K8sCluster, name: str, node: str, mib: int) -> None:
    """A pod HAMi's scheduler has filtered onto ``node``'s first card, its Binding not posted:
    the annotations HAMi's ``Filter`` and ``Bind`` write, no ``spec.nodeName``."""
    p = gpu_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)})
    p["spec"]["schedulerName"] = "hami-scheduler"  # no such scheduler runs here
    text = f"GPU-{node}-0,NVIDIA,{mib},0:;"
    now = str(int(time.time()))
    p["metadata"]["annotations"] = {
        VGPU_NODE: node,
        "hami.io/vgpu-time": now,
        "hami.io/vgpu-devices-to-allocate": text,
        ALLOCATED: text,
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": now,
    }
    create(kc, p)


def test_a_pod_hami_assigned_holds_its_card_before_its_binding(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """HAMi assigned 60000 MiB of the only A100; its Binding has not landed. A 30000 MiB pod is
    refused (seen failing first: it was bound onto the card HAMi had assigned); once the assigned
    pod is deleted, a pod of 50000 MiB binds there. (A new pod: kube-scheduler does not wake the
    refused one for the deletion of a pod that was never bound; 50000 MiB fits beside it if it
    is woken all the same.)"""
    kc, _ = stack
    add_nodes(kc, hami_node("assigned-a", A100, 1))
    try:
        hami_assigns(kc, "from-hami", "assigned-a", 60000)
        time.sleep(1)  # for the extender's watch to bring it (no timing asserted)
        create(kc, gpu_pod("late", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}))
        assert "xpupool:" in refused(kc, "late")
        kc.api.delete(f"/api/v1/namespaces/{NS}/pods/from-hami", params={"gracePeriodSeconds": "0"})
        time.sleep(1)  # for the extender's watch to bring the deletion (no timing asserted)
        create(kc, gpu_pod("after", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "50000"}))
        got = bound(kc, ["after"])["after"]
        assert [u for u, _, _ in shares(got)] == ["GPU-assigned-a-0"]
    finally:
        delete_pods(kc)
        remove_nodes(kc, "assigned-a")


def stripped_while_pending(kc: K8sCluster, name: str, timeout_s: float) -> dict[str, Any]:
    """The pod once it is seen unbound with no ``hami.io/vgpu-node`` after its bind wrote one (its
    group released, before kube-scheduler tries it again); fails when that is never seen."""
    deadline = time.monotonic() + timeout_s
    annotated = False
    while time.monotonic() < deadline:
        p = pod(kc, name)
        assert not p["spec"].get("nodeName"), f"{name} was bound alone"
        held = p["metadata"].get("annotations") or {}
        if VGPU_NODE in held:
            annotated = True
        elif annotated:
            return p
        time.sleep(0.05)
    raise AssertionError(f"{name}: annotated {annotated}, never stripped in {timeout_s:.0f} s")


def test_a_released_gang_member_keeps_no_assignment(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """A group of two whose second member comes late: the first member's bind annotates its pod,
    waits, and its group is released; its annotations go with it (seen failing first: the pod
    kept ``hami.io/vgpu-node`` and its allocated annotation). Once the second member comes, both
    bind on the card, which holds them both."""
    kc, _ = stack
    add_nodes(kc, hami_node("gang-a", A100, 1))
    ours = {"xpupool.io/gang": "pair", "xpupool.io/gang-size": "2"}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}
    try:
        create(kc, gpu_pod("pair-0", limits, dict(ours)))
        assert "members reached bind" in reasons(kc, "pair-0", timeout_s=4 * GANG_WAIT_S)
        left = stripped_while_pending(kc, "pair-0", 6 * GANG_WAIT_S)
        held = left["metadata"]["annotations"]
        assert ALLOCATED not in held and "hami.io/vgpu-devices-to-allocate" not in held
        assert held["xpupool.io/gang"] == "pair"
        create(kc, gpu_pod("pair-1", limits, dict(ours)))
        pods = bound(kc, ["pair-0", "pair-1"], timeout_s=90)
        assert sorted(u for p in pods.values() for u, _, _ in shares(p)) == ["GPU-gang-a-0"] * 2
    finally:
        delete_pods(kc)
        remove_nodes(kc, "gang-a")
