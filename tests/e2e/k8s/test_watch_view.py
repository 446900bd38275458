"""The cluster view against a real kube-apiserver: the engine follows Nodes (added, cordoned,
devices changed, deleted) and bound Pods (charged, finished, deleted); reservations made through
the view's engine and then bound through the API are not counted twice; and a view started afresh
(an extender restart) rebuilds the very same engine state from the bound pods alone.

The decoders are the tests' own, small ones: devices in the one device wire form
(``server/schemas/agent_protocol.py`` ``DeviceIn``) under ``test.xpupool.io/devices``, a pod's charge as JSON
under ``test.xpupool.io/charge``; the real HAMi and xpupool codecs plug in the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from cluster import K8sCluster

from xpupool.k8s.informers.cluster_view import CardShare, ClusterView, PodDevices
from xpupool.k8s.informers.kubeconfig import load_config
from xpupool.model import DeviceRequest, Request
from xpupool.model.device import Node
from xpupool.server.schemas.agent_protocol import DeviceIn

from factories import capacity_arrays

pytestmark = pytest.mark.k8s

DEVICES = "test.xpupool.io/devices"
CHARGE = "test.xpupool.io/charge"
MERGE = {"Content-Type": "application/merge-patch+json"}
GIB = 1024


def decode_node(obj: dict[str, Any]) -> Node | None:
    text = (obj["metadata"].get("annotations") or {}).get(DEVICES)
    if text is None:
        return None
    devices = tuple(DeviceIn.model_validate(d).to_device() for d in json.loads(text))
    return Node(obj["metadata"]["name"], 32_000, 256 * GIB, devices)


def decode_pod(obj: dict[str, Any]) -> PodDevices | None:
    text = (obj["metadata"].get("annotations") or {}).get(CHARGE)
    if text is None:
        return None
    charge = json.loads(text)
    containers = tuple(tuple(CardShare(**share) for share in c) for c in charge["containers"])
    return PodDevices(charge["node"], containers)


@pytest.fixture
def make_view(cluster: K8sCluster) -> Iterator[Callable[[], ClusterView]]:
    views: list[ClusterView] = []

    def make() -> ClusterView:
        view = ClusterView(decode_node, decode_pod, profile="binpack")
        views.append(view.watch(load_config(cluster.kubeconfig), resync_s=0))
        assert view.wait_synced(20)
        return view

    yield make
    for view in views:
        view.stop()


def cards(node: str, n: int, mib: int = 80 * GIB) -> str:
    return json.dumps(
        [
            {"uuid": f"{node}-gpu{i}", "vendor": "nvidia", "model": "A100", "memory_mib": mib}
            for i in range(n)
        ]
    )


def node_body(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
    }


def pod_body(name: str, node: str | None = None, charge: Any = None) -> dict[str, Any]:
    annotations = {CHARGE: json.dumps(charge)} if charge is not None else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": spec,
    }


def until(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s} s")
        time.sleep(0.05)


def free_mib(view: ClusterView) -> dict[str, int]:
    with view.engine_locked() as engine:
        s = engine.state
        return {u: int(s.dev_mem_free.reshape(-1)[slot]) for u, slot in s.uuid_slot.items()}


def pool(view: ClusterView) -> list[str]:
    with view.engine_locked() as engine:
        s = engine.state
        return [n for i, n in enumerate(s.node_names) if s.node_alive[i]]


def test_view_follows_nodes_and_pods(
    cluster: K8sCluster, make_view: Callable[[], ClusterView]
) -> None:
    api = cluster.api
    api.post("/api/v1/nodes", json=node_body("fa", {DEVICES: cards("fa", 2)})).raise_for_status()
    view = make_view()  # one node listed, the others watched
    assert pool(view) == ["fa"]
    api.post("/api/v1/nodes", json=node_body("fb", {DEVICES: cards("fb", 2)})).raise_for_status()
    api.post("/api/v1/nodes", json=node_body("fc", {})).raise_for_status()  # not in the pool
    until(lambda: pool(view) == ["fa", "fb"])

    api.patch("/api/v1/nodes/fa", json={"spec": {"unschedulable": True}}, headers=MERGE)
    with view.engine_locked() as engine:
        index = engine.state.node_index["fa"]
    until(lambda: not view.nodes()["fa"].schedulable)
    with view.engine_locked() as engine:
        assert not engine.state.node_schedulable[index]

    share = {"uuid": "fb-gpu1", "memory_mib": 20 * GIB, "core_permille": 250}
    charge = {"node": "fb", "containers": [[share], []]}
    api.post(
        "/api/v1/namespaces/default/pods", json=pod_body("fv-p1", "fb", charge)
    ).raise_for_status()
    until(lambda: free_mib(view).get("fb-gpu1") == 60 * GIB)

    api.patch("/api/v1/nodes/fb", json={"metadata": {"annotations": {DEVICES: cards("fb", 3)}}},
              headers=MERGE).raise_for_status()  # fmt: skip
    until(lambda: "fb-gpu2" in free_mib(view))
    assert free_mib(view)["fb-gpu1"] == 60 * GIB  # the charge survives the rebuild

    api.delete("/api/v1/namespaces/default/pods/fv-p1", params={"gracePeriodSeconds": 0})
    until(lambda: free_mib(view)["fb-gpu1"] == 80 * GIB)

    api.post(
        "/api/v1/namespaces/default/pods", json=pod_body("fv-p2", "fb", charge)
    ).raise_for_status()
    until(lambda: free_mib(view)["fb-gpu1"] == 60 * GIB)
    api.patch(
        "/api/v1/namespaces/default/pods/fv-p2/status",
        json={"status": {"phase": "Succeeded"}},
        headers=MERGE,
    ).raise_for_status()
    until(lambda: free_mib(view)["fb-gpu1"] == 80 * GIB)  # finished: left the selection

    api.delete("/api/v1/nodes/fa").raise_for_status()
    until(lambda: pool(view) == ["fb"])
    assert view.charges() == {}


def test_restart_rebuilds_the_same_state_from_bound_pods(
    cluster: K8sCluster, make_view: Callable[[], ClusterView]
) -> None:
    api = cluster.api
    for name, n in [("ra", 4), ("rb", 2)]:
        api.post(
            "/api/v1/nodes", json=node_body(name, {DEVICES: cards(name, n)})
        ).raise_for_status()
    first = make_view()
    until(lambda: {"ra", "rb"} <= set(pool(first)))
    asks = [4 * GIB, 30 * GIB, 8 * GIB, 70 * GIB, 2 * GIB]
    for i, mib in enumerate(asks):
        pod = api.post("/api/v1/namespaces/default/pods", json=pod_body(f"rv-{i}")).json()
        request = Request(f"rv-{i}", 0, 0, DeviceRequest(count=1, memory_mib=mib))
        with first.engine_locked() as engine:  # what the extender's filter + bind do
            placement = engine.place(request)
            assert placement.ok
            first.reserve(pod["metadata"]["uid"], placement.allocations)
        alloc = placement.allocations[0]
        charge = {
            "node": alloc.node,
            "containers": [[{"uuid": d.uuid, "memory_mib": d.memory_mib,
                             "core_permille": d.core_permille} for d in alloc.devices]],
        }  # fmt: skip
        meta = {"resourceVersion": pod["metadata"]["resourceVersion"],
                "annotations": {CHARGE: json.dumps(charge)}}  # fmt: skip
        api.patch(
            f"/api/v1/namespaces/default/pods/rv-{i}", json={"metadata": meta}, headers=MERGE
        ).raise_for_status()
        api.post(
            f"/api/v1/namespaces/default/pods/rv-{i}/binding",
            json={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"rv-{i}"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": alloc.node},
            },
        ).raise_for_status()
    with first.engine_locked() as engine:
        reserved = capacity_arrays(engine.state)
        placed = first.charges()

    def all_bound() -> bool:
        pods = api.get("/api/v1/namespaces/default/pods").json()["items"]
        bound = {p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName")}
        return set(placed) <= bound

    until(all_bound)
    time.sleep(1.0)  # the bound forms reach the first view
    with first.engine_locked() as engine:
        after = capacity_arrays(engine.state)
    for key in reserved:  # the bound forms did not charge anything twice
        np.testing.assert_array_equal(reserved[key], after[key], err_msg=key)
    assert first.charges() == placed

    second = make_view()  # a restarted extender: only the cluster to go by
    until(lambda: set(second.charges()) == set(placed))
    with second.engine_locked() as engine:
        rebuilt = capacity_arrays(engine.state)
    assert rebuilt.keys() == after.keys()
    for key in after:
        np.testing.assert_array_equal(after[key], rebuilt[key], err_msg=key)
