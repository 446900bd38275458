"""kube-controller-manager in the e2e control plane (``K8sCluster(controller_manager=True)``):
each controller the plane's Kubernetes site relies on runs against the real kube-apiserver, with
kube-scheduler placing the pods and kwok playing their kubelet.

- deployment and replicaset: a Deployment gets its ReplicaSet, the ReplicaSet its Pods, and kwok
  makes them Running;
- endpointslice: a Service with a selector gets an EndpointSlice listing those pods' addresses,
  and a selector-less Service keeps the EndpointSlice a test wrote by hand (the shape a service's
  forwarding reads: docs/kubernetes.md);
- garbagecollector: deleting the Deployment removes its ReplicaSet and Pods (owner references);
- namespace: deleting a namespace removes its pods, then the namespace;
- serviceaccount: a new namespace gets its ``default`` ServiceAccount.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cluster import (
    CONTROLLER_MANAGER,
    CONTROLLERS,
    KWOK_NODE_ANNOTATION,
    SCHEDULER_NAME,
    K8sCluster,
    require_binaries,
)

pytestmark = pytest.mark.k8s

NS = "apps"
LABELS = {"app": "web"}
T = TypeVar("T")


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", CONTROLLER_MANAGER, "kwok"))
    workdir: Path = tmp_path_factory.mktemp("kcm")
    with K8sCluster(workdir, kwok=True, controller_manager=True) as cluster:
        cluster.create(
            "/api/v1/nodes",
            {"metadata": {"name": "node-1", "annotations": {KWOK_NODE_ANNOTATION: "fake"}}},
        )
        cluster.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        yield cluster


def eventually(
    what: str, probe: Callable[[], T | None], kc: K8sCluster, timeout_s: float = 60
) -> T:
    """``probe()`` once it returns something truthy; fails with the controller manager's log
    tail when ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s} s\n{kc.log(CONTROLLER_MANAGER)[-3000:]}")


def items(kc: K8sCluster, path: str, selector: str = "") -> list[dict[str, Any]]:
    r = kc.api.get(path, params={"labelSelector": selector} if selector else None)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def pod_template() -> dict[str, Any]:
    return {
        "metadata": {"labels": LABELS},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "web", "image": "web:1", "ports": [{"containerPort": 80}]}],
        },
    }


def running(pods: list[dict[str, Any]], n: int) -> list[dict[str, Any]] | None:
    up = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return up if len(up) == n else None


@pytest.fixture(scope="module")
def deployment(kc: K8sCluster) -> list[dict[str, Any]]:
    """A two-replica Deployment, once both its pods run: those pods."""
    kc.create(
        f"/apis/apps/v1/namespaces/{NS}/deployments",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": LABELS},
                "template": pod_template(),
            },
        },
    )
    return eventually(
        "the Deployment's two pods running",
        lambda: running(items(kc, f"/api/v1/namespaces/{NS}/pods", "app=web"), 2),
        kc,
    )


def test_controllers_run_as_named(kc: K8sCluster) -> None:
    """The controller manager runs exactly the controllers the harness names (docs say which)."""
    assert kc.controllers == CONTROLLERS
    (kcm,) = [c for c in kc.components if c.name == CONTROLLER_MANAGER]
    assert kcm.alive()
    assert f"--controllers={','.join(CONTROLLERS)}" in list(kcm.proc.args)  # type: ignore[arg-type]
    # The serviceaccount controller: the namespace the fixture made has its default account.
    eventually(
        "the default ServiceAccount",
        lambda: kc.api.get(f"/api/v1/namespaces/{NS}/serviceaccounts/default").status_code == 200,
        kc,
    )


def test_a_deployment_gets_its_replicaset_and_running_pods(
    kc: K8sCluster, deployment: list[dict[str, Any]]
) -> None:
    (rs,) = items(kc, f"/apis/apps/v1/namespaces/{NS}/replicasets", "app=web")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    for p in deployment:
        owner = p["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("ReplicaSet", rs["metadata"]["name"])
        assert p["spec"]["nodeName"] == "node-1"
        assert p["status"].get("podIP")


def test_a_service_gets_the_endpointslice_of_its_pods(
    kc: K8sCluster, deployment: list[dict[str, Any]]
) -> None:
    kc.create(
        f"/api/v1/namespaces/{NS}/services",
        {"metadata": {"name": "web"}, "spec": {"selector": LABELS, "ports": [{"port": 80}]}},
    )

    def addresses() -> set[str] | None:
        slices = items(
            kc,
            f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
            "kubernetes.io/service-name=web",
        )
        got = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
        return got if len(got) == 2 else None

    got = eventually("an EndpointSlice with both pods", addresses, kc)
    assert got == {p["status"]["podIP"] for p in deployment}


def test_a_selectorless_service_keeps_a_hand_made_endpointslice(kc: K8sCluster) -> None:
    """The shape the plane's service forwarding reads: no selector, so the endpointslice
    controller leaves the slice someone else manages as it was written."""
    kc.create(
        f"/api/v1/namespaces/{NS}/services",
        {"metadata": {"name": "outside"}, "spec": {"ports": [{"port": 8000}]}},
    )
    kc.create(
        f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
        {
            "metadata": {
                "name": "outside-1",
                "labels": {
                    "kubernetes.io/service-name": "outside",
                    "endpointslice.kubernetes.io/managed-by": "xpupool-test",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "", "port": 8000, "protocol": "TCP"}],
            # The apiserver refuses loopback addresses in a slice (127.0.0.0/8): a local process
            # behind one must be given by another address of its machine.
            "endpoints": [{"addresses": ["10.1.2.3"], "conditions": {"ready": True}}],
        },
    )
    time.sleep(1.0)  # a controller that would rewrite it has had its chance (not a timing check)
    (got,) = items(
        kc,
        f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
        "kubernetes.io/service-name=outside",
    )
    assert got["metadata"]["name"] == "outside-1"
    assert got["endpoints"][0]["addresses"] == ["10.1.2.3"]
    assert got["ports"][0]["port"] == 8000


def test_deleting_a_deployment_collects_its_replicaset_and_pods(
    kc: K8sCluster, deployment: list[dict[str, Any]]
) -> None:
    r = kc.api.delete(
        f"/apis/apps/v1/namespaces/{NS}/deployments/web",
        params={"propagationPolicy": "Background"},
    )
    assert r.status_code == 200, r.text
    eventually(
        "the ReplicaSet and pods collected",
        lambda: (
            not items(kc, f"/apis/apps/v1/namespaces/{NS}/replicasets", "app=web")
            and not items(kc, f"/api/v1/namespaces/{NS}/pods", "app=web")
        ),
        kc,
    )


def test_deleting_a_namespace_removes_its_pods(kc: K8sCluster) -> None:
    kc.create("/api/v1/namespaces", {"metadata": {"name": "doomed"}})
    lone = pod_template()
    lone["metadata"]["name"] = "lone"
    kc.create("/api/v1/namespaces/doomed/pods", lone)
    eventually(
        "the pod running",
        lambda: running(items(kc, "/api/v1/namespaces/doomed/pods"), 1),
        kc,
    )
    r = kc.api.delete("/api/v1/namespaces/doomed")
    assert r.status_code == 200, r.text
    eventually(
        "the namespace and its pod gone",
        lambda: kc.api.get("/api/v1/namespaces/doomed").status_code == 404,
        kc,
    )
    assert kc.api.get("/api/v1/namespaces/doomed/pods/lone").status_code == 404
