"""Init containers charged as HAMi charges them (issue 56), behind a real kube-scheduler (v1.36) on a
real kube-apiserver with xpupool's extender: per card the larger of the init containers' peak and
the app containers' sum, the app containers' sum alone once every init container has succeeded.

HAMi v2.10.0 (``pkg/scheduler/score.go``, ``pkg/device/initContainer.go``, commit 4707fb02c91c)
places each init container and the app containers against the card as it is, so it binds a pod
whose init container and app each take 60 % of one card, and charges it 60 %. Before, xpupool kept
such a pod Pending, and a restarted extender reading a HAMi-bound one found the sum over the card,
dropped the pod's whole charge and gave its card away again; ``allocation_audit`` reported double
allocations that were not there. Nothing here runs a kubelet: a test writes the pod status a
kubelet would (an init container running, then terminated with exit code 0).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import ExtenderProcess, K8sCluster, extender_stack, free_port
from test_extender_e2e import (
    A100,
    H100,
    NS,
    add_nodes,
    bound,
    create,
    delete_pods,
    every_verb,
    gpu_pod,
    hami_node,
    pod,
    refused,
    remove_nodes,
    shares,
)

from xpupool.k8s.codec.allocation_audit import AuditReport, audit_allocations

pytestmark = pytest.mark.k8s

ALLOCATED = "hami.io/vgpu-devices-allocated"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    folder = tmp_path_factory.mktemp("init-containers")
    with extender_stack(folder, port, every_verb(port)) as both:
        yield both


def card(share: int, name: str) -> dict[str, Any]:
    """A container of one card, ``share`` % of its memory and compute."""
    limits = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": str(share),
        "nvidia.com/gpucores": str(share),
    }
    return {"name": name, "image": "registry.invalid/none:0", "resources": {"limits": limits}}


def pinned(name: str, share: int, uuid: str, init_share: int = 0) -> dict[str, Any]:
    """A pod of ``share`` % of card ``uuid`` (HAMi's ``use-gpuuuid``), with an init container of
    ``init_share`` % when given."""
    p = gpu_pod(name, {}, {"nvidia.com/use-gpuuuid": uuid})
    p["spec"]["containers"] = [card(share, "main")]
    if init_share:
        p["spec"]["initContainers"] = [card(init_share, "init")]
    return p


def audit(kc: K8sCluster) -> AuditReport:
    nodes = kc.api.get("/api/v1/nodes").json()["items"]
    pods = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
    return audit_allocations(nodes, pods)


def test_init_and_app_containers_share_one_pinned_card(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """Init 60 % and app 60 % pinned to one H100: bound, both on that card, charged 60 %, also
    after the extender restarts; the audit finds no double allocation."""
    kc, proc = stack
    add_nodes(kc, hami_node("pin-h", H100, 2))
    uuid = "GPU-pin-h-0"
    try:
        create(kc, pinned("init-pod", 60, uuid, init_share=60))
        got = bound(kc, ["init-pod"])["init-pod"]
        assert got["spec"]["nodeName"] == "pin-h"
        mib = H100[1] * 60 // 100
        assert got["metadata"]["annotations"][ALLOCATED] == f"{uuid},NVIDIA,{mib},60:;" * 2
        create(kc, pinned("over", 50, uuid))  # 60 % + 50 % of the card
        assert "xpupool:" in refused(kc, "over")
        create(kc, pinned("fits", 40, uuid))
        bound(kc, ["fits"])
        report = audit(kc)
        assert (report.pods, report.double_allocations) == (2, 0), report.over
        proc.stop()
        proc.start()  # rebuilds the charges from the pods alone
        create(kc, pinned("after-restart", 10, uuid))
        assert "xpupool:" in refused(kc, "after-restart")
        assert not pod(kc, "over")["spec"].get("nodeName")
    finally:
        delete_pods(kc)
        remove_nodes(kc, "pin-h")


def hami_binds(kc: K8sCluster, name: str, node: str, init_mib: int, app_mib: int) -> None:
    """A pod HAMi's scheduler placed: its init container and app on the node's first card, the
    annotations HAMi writes (``Filter``'s and ``Bind``'s, the device plugin's ``success``), the
    Binding, and the status of a kubelet running its init container."""
    uuid = f"GPU-{node}-0"
    p = gpu_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(app_mib)})
    p["spec"]["schedulerName"] = "hami-scheduler"  # no such scheduler runs here
    init = {**p["spec"]["containers"][0], "name": "init"}
    init["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(init_mib)}}
    p["spec"]["initContainers"] = [init]
    text = f"{uuid},NVIDIA,{init_mib},0:;{uuid},NVIDIA,{app_mib},0:;"
    now = str(int(time.time()))
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-time": now,
        "hami.io/vgpu-devices-to-allocate": text,
        ALLOCATED: text,
        "hami.io/bind-phase": "success",
        "hami.io/bind-time": now,
    }
    create(kc, p)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    r = kc.api.post(f"/api/v1/namespaces/{NS}/pods/{name}/binding", json=binding)
    assert r.status_code == 201, r.text
    init_state(kc, name, {"running": {"startedAt": "2026-01-01T00:00:00Z"}})


def init_state(kc: K8sCluster, name: str, state: dict[str, Any]) -> None:
    """Write the init container's status as its kubelet would."""
    status = {
        "phase": "Pending",
        "initContainerStatuses": [
            {
                "name": "init",
                "state": state,
                "ready": False,
                "restartCount": 0,
                "image": "registry.invalid/none:0",
                "imageID": "",
            }
        ],
    }
    r = kc.api.patch(
        f"/api/v1/namespaces/{NS}/pods/{name}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text


def test_a_restarted_extender_charges_a_hami_bound_init_container_pod(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """HAMi bound init 60000 MiB and app 40000 MiB to one 80 GB A100 while the extender was down:
    restarted, it charges the pod 60000 MiB, refuses a 30000 MiB pod there, and the audit finds
    no double allocation. Once the init container has exited 0, the pod holds 40000 MiB and a
    30000 MiB pod binds."""
    kc, proc = stack
    add_nodes(kc, hami_node("moved-a", A100, 1))
    try:
        proc.stop()
        hami_binds(kc, "from-hami", "moved-a", 60000, 40000)
        proc.start()
        create(kc, gpu_pod("late", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}))
        assert "xpupool:" in refused(kc, "late")
        report = audit(kc)
        assert (report.pods, report.double_allocations) == (1, 0), report.over
        kc.api.delete(f"/api/v1/namespaces/{NS}/pods/late", params={"gracePeriodSeconds": "0"})
        init_state(kc, "from-hami", {"terminated": {"exitCode": 0, "reason": "Completed"}})
        time.sleep(1)  # for the extender's watch to bring the status (no timing asserted)
        create(kc, gpu_pod("after-init", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}))
        got = bound(kc, ["after-init"])["after-init"]
        assert [u for u, _, _ in shares(got)] == ["GPU-moved-a-0"]
        report = audit(kc)
        assert (report.pods, report.double_allocations) == (2, 0), report.over
    finally:
        delete_pods(kc)
        remove_nodes(kc, "moved-a")
