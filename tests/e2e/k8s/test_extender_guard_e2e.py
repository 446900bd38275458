"""What ``xpupool k8s extender`` refuses to do for whoever reaches its port (issue 43, item 10),
against a real kube-apiserver: ``/bind`` posts a Binding only for a pod that asks the apiserver
for a managed resource, on a Node the extender has seen, where the engine holds the pod now; a
``/filter`` body claiming more than the pod asks does not change that; a chunked body is cut off
at the size limit instead of being read whole.

No kube-scheduler runs: the test is the caller, as anyone on the network could be. Nodes carry
HAMi's registration annotation, as in ``test_extender_e2e.py``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import ExtenderProcess, K8sCluster, free_port
from test_extender_e2e import A100, NS, T4, add_nodes, gpu_pod, hami_node

from xpupool.k8s.extender.wire import MAX_BODY_BYTES

pytestmark = pytest.mark.k8s

MIB = 1 << 20


@pytest.fixture(scope="module")
def extender_proc(
    cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExtenderProcess]:
    """An extender over two nodes of the pool (a T4 and an A100)."""
    add_nodes(cluster, hami_node("guard-t4", T4, 1, split=4), hami_node("guard-a100", A100, 1))
    log = tmp_path_factory.mktemp("guard") / "extender.log"
    proc = ExtenderProcess(cluster.kubeconfig, free_port(), log).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def extender(extender_proc: ExtenderProcess) -> str:
    return extender_proc.url


def plain_pod(name: str) -> dict[str, Any]:
    """A pod of kube-system asking for nothing the extender manages (as a DNS server's would)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "schedulerName": "nobody",
            "containers": [{"name": "main", "image": "registry.invalid/none:0"}],
        },
    }


def created(kc: K8sCluster, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"].get("namespace", NS)
    body = {**body, "spec": {**body["spec"], "schedulerName": "nobody"}}  # nobody schedules it
    return kc.create(f"/api/v1/namespaces/{ns}/pods", body)


def bind(url: str, pod: dict[str, Any], node: str) -> str:
    """POST /bind for ``pod`` to ``node``; the answer's ``Error`` ("" when it bound)."""
    meta = pod["metadata"]
    args = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node,
    }
    r = httpx.post(f"{url}/bind", json=args, timeout=30)
    assert r.status_code == 200, r.text
    return str(r.json()["Error"])


def filter_(url: str, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    r = httpx.post(f"{url}/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert r.status_code == 200, r.text
    return dict(r.json())


def now(kc: K8sCluster, pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    r = kc.api.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    r.raise_for_status()
    return dict(r.json())


def assert_untouched(kc: K8sCluster, pod: dict[str, Any]) -> None:
    """Nothing posted: the pod is not bound and carries no annotation of a bind."""
    after = now(kc, pod)
    assert not after["spec"].get("nodeName"), after["spec"].get("nodeName")
    annotations = after["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith("hami.io/")], annotations


def test_bind_of_a_pod_that_asks_for_no_managed_resource_is_refused(
    cluster: K8sCluster, extender: str
) -> None:
    pod = created(cluster, plain_pod("guard-dns"))
    for node in ("guard-a100", "ghost-node"):  # a node of the pool, one nobody knows
        error = bind(extender, pod, node)
        assert "asks for no resource" in error, error
    assert_untouched(cluster, pod)


def test_bind_to_a_node_the_extender_does_not_know_is_refused(
    cluster: K8sCluster, extender: str
) -> None:
    pod = created(cluster, gpu_pod("guard-ghost", {"nvidia.com/gpu": "1"}))
    error = bind(extender, pod, "ghost-node")
    assert "ghost-node" in error, error
    assert_untouched(cluster, pod)


def test_bind_to_a_node_the_filter_refused_for_the_pod_is_refused(
    cluster: K8sCluster, extender: str
) -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}  # more than a T4 holds
    pod = created(cluster, gpu_pod("guard-big", limits))
    answer = filter_(extender, pod, ["guard-t4", "guard-a100"])
    assert answer["NodeNames"] == ["guard-a100"], answer
    error = bind(extender, pod, "guard-t4")
    assert "guard-t4" in error, error
    assert_untouched(cluster, pod)
    assert bind(extender, pod, "guard-a100") == ""  # where the filter said: bound
    assert now(cluster, pod)["spec"]["nodeName"] == "guard-a100"


def test_a_filter_body_claiming_devices_the_pod_does_not_ask_for_binds_nothing(
    cluster: K8sCluster, extender: str
) -> None:
    """A caller that knows a pod's UID and resourceVersion sends it to ``/filter`` as asking
    for a card, then binds it: bind judges the pod the apiserver holds, not the caller's copy."""
    pod = created(cluster, plain_pod("guard-forged"))
    forged = copy.deepcopy(pod)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
    forged["spec"]["containers"][0]["resources"] = {"limits": limits}
    answer = filter_(extender, forged, ["guard-a100"])
    assert answer["NodeNames"] == ["guard-a100"], answer  # the forged pod fits there
    error = bind(extender, pod, "guard-a100")
    assert "asks for no resource" in error, error
    assert_untouched(cluster, pod)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_chunked_body_is_cut_off_at_the_limit_not_read_whole(
    extender_proc: ExtenderProcess,
) -> None:
    """200 MiB sent chunked (no Content-Length, so nothing can be refused up front), made one
    MiB at a time: the extender answers 413 once the limit has arrived and closes the
    connection, so the client cannot send the rest, and the extender's memory does not grow by
    the body's size. Before, it read all 200 MiB, then refused it as too large."""
    total = 200 * MIB
    sent = 0
    chunk = b" " * MIB

    def body() -> Iterator[bytes]:
        nonlocal sent
        while sent < total:
            sent += len(chunk)
            yield chunk

    extender = extender_proc.url
    assert extender_proc.proc is not None
    pid = extender_proc.proc.pid
    before = rss_mib(pid)
    status: int | str
    started = time.monotonic()
    try:
        r = httpx.post(f"{extender}/filter", content=body(), timeout=60)
        status = r.status_code
        assert status == 413, r.text
        assert json.loads(r.text)["field"] == "body"
    except httpx.TransportError as exc:  # the server closed while we were still sending
        status = type(exc).__name__
    grown = rss_mib(pid) - before
    assert sent < MAX_BODY_BYTES + 32 * MIB, (sent // MIB, status)
    assert grown < 150, (grown, status)
    assert time.monotonic() - started < 60  # liveness only
    assert httpx.get(f"{extender}/healthz").status_code == 200  # and it still serves
