"""Spike for the Kubernetes front: one GPU pod scheduled by a real kube-scheduler (v1.36) through
an HTTP extender, against a real kube-apiserver and etcd. It proves the scheduler configuration,
the extender wire format and extender-side binding before the engine-backed extender is built.

Run with ``make test-k8s`` (builds the binaries first); ``make test`` runs it too and ``make
test-fast`` leaves out the ``k8s`` marker. Missing binaries fail the test rather than skip it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from cluster import BINARIES, K8sCluster, require_binaries
from stub_extender import StubExtender

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
NODES = ("gpu-a", "gpu-b")
ADMITTED = "gpu-b"  # the stub's filter admits only this one


@pytest.fixture(params=[False], ids=["no-kwok"])
def spike(request: pytest.FixtureRequest) -> Iterator[tuple[StubExtender, K8sCluster]]:
    """A stub extender admitting only ``ADMITTED``, and a control plane whose scheduler calls it
    (plus kwok when the parameter says so)."""
    require_binaries((*BINARIES, "kwok") if request.param else BINARIES)
    with (
        StubExtender(admit={ADMITTED}) as ext,
        K8sCluster(extender_url=ext.url, kwok=request.param) as kc,
    ):
        ext.connect(kc.api)
        yield ext, kc


def fake_gpu_node(name: str, gpus: int) -> dict[str, Any]:
    """A Node as a kubelet would report it; the apiserver keeps status given at creation."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node for tests",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def gpu_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"limits": {GPU: "1"}},
                }
            ],
        },
    }


def wait_for_node_name(kc: K8sCluster, ns: str, name: str, timeout_s: float = 30.0) -> str:
    """Poll the pod until it is bound; fail with its status and the scheduler log otherwise."""
    deadline = time.monotonic() + timeout_s
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = kc.api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        r.raise_for_status()
        pod = r.json()
        node_name = pod["spec"].get("nodeName")
        if node_name:
            return str(node_name)
        time.sleep(0.2)
    pytest.fail(
        f"pod {ns}/{name} not bound after {timeout_s}s; status={pod.get('status')}\n"
        f"kube-scheduler log tail:\n{kc.log('kube-scheduler')[-4000:]}"
    )


def test_pod_is_scheduled_through_the_extender(spike: tuple[StubExtender, K8sCluster]) -> None:
    ext, kc = spike
    for name in NODES:
        r = kc.api.post("/api/v1/nodes", json=fake_gpu_node(name, gpus=8))
        assert r.status_code == 201, r.text
    r = kc.api.post("/api/v1/namespaces/default/pods", json=gpu_pod("spike", kc.scheduler_name))
    assert r.status_code == 201, r.text
    uid = r.json()["metadata"]["uid"]

    assert wait_for_node_name(kc, "default", "spike") == ADMITTED

    filters = [c.body for c in ext.calls("filter") if c.body["Pod"]["metadata"]["name"] == "spike"]
    assert filters, f"no filter call for the pod: {ext.calls()}"
    assert sorted(filters[0]["NodeNames"]) == sorted(NODES)  # nodeCacheCapable: names only
    assert filters[0]["Nodes"] is None
    binds = [c.body for c in ext.calls("bind")]
    assert binds == [
        {"PodName": "spike", "PodNamespace": "default", "PodUID": uid, "Node": ADMITTED}
    ]


@pytest.mark.parametrize("spike", [True], ids=["kwok"], indirect=True)
def test_kwok_runs_the_bound_pod(spike: tuple[StubExtender, K8sCluster]) -> None:
    """kwok plays kubelet for fake nodes: the pod the extender bound reaches phase Running."""
    _, kc = spike
    for name in NODES:
        assert kc.api.post("/api/v1/nodes", json=fake_gpu_node(name, gpus=8)).status_code == 201
    r = kc.api.post("/api/v1/namespaces/default/pods", json=gpu_pod("spike", kc.scheduler_name))
    assert r.status_code == 201, r.text
    assert wait_for_node_name(kc, "default", "spike") == ADMITTED
    deadline = time.monotonic() + 30
    phase = None
    while time.monotonic() < deadline:
        phase = kc.api.get("/api/v1/namespaces/default/pods/spike").json()["status"].get("phase")
        if phase == "Running":
            break
        time.sleep(0.2)
    assert phase == "Running", kc.log("kwok")[-4000:]
