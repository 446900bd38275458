"""HAMi's card policies honoured by xpupool's extender behind a real kube-scheduler on a real
kube-apiserver (issue 56, "HAMi's policies are silently ignored"), one test per policy:

- ``hami.io/device-cordon`` on a Node (HAMi v2.10.0 ``pkg/device/nvidia/device.go``
  ``cordonedDevices``: comma-separated card UUIDs) keeps new pods off those cards (HAMi:
  ``CardCordoned``), and lifting it lets them in at once;
- ``nvidia.com/vgpu-mode`` on a Pod takes only cards registered in that mode (``checkType``: the
  card's ``mode`` must occur in the annotation; HAMi: ``CardTypeMismatch``); ``mig`` asks for a
  MIG instance holding the pod's memory, which a pool of HAMi-core cards has none of;
- ``nvidia.com/numa-bind: "true"`` puts all cards of a container on one NUMA node (HAMi:
  ``NumaNotFit`` when no NUMA node holds them);
- a namespace ResourceQuota on ``limits.nvidia.com/gpumem`` caps the card memory its pods hold
  (HAMi's ``QuotaManager.FitQuota``; HAMi: ``ResourceQuotaNotFit``).

Nodes carry HAMi's registration annotation as HAMi's device plugin writes it, with each card's
``numa`` and ``mode``; nothing runs a kubelet.
"""

from __future__ import annotations

import json
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
    pod,
    reasons,
    remove_nodes,
    shares,
)

pytestmark = pytest.mark.k8s

CORDON = "hami.io/device-cordon"
QUOTA_NS = "quota-team"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    ext = every_verb(port)
    with extender_stack(tmp_path_factory.mktemp("policies"), port, ext) as both:
        yield both


def node(
    name: str,
    cards: list[tuple[int, str]],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node HAMi's device plugin registered: one A100 per ``(numa, mode)`` of ``cards``."""
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": A100[1],
            "devcore": 100,
            "type": A100[0],
            "numa": numa,
            "mode": mode,
            "health": True,
        }
        for i, (numa, mode) in enumerate(cards)
    ]
    resources = {"cpu": "64", "memory": "512Gi", "pods": "500", "nvidia.com/gpu": "80"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)}
            | (annotations or {}),
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def annotate_node(kc: K8sCluster, name: str, annotations: dict[str, str | None]) -> None:
    r = kc.api.patch(
        f"/api/v1/nodes/{name}",
        json={"metadata": {"annotations": annotations}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text


def nudged(kc: K8sCluster, node: str, ns: str, n: int, exclude: str = "") -> list[str]:
    """The names of the pods of ``ns`` bound (``exclude`` not counted) once at least ``n`` are,
    touching ``node`` every few seconds meanwhile. A change that frees room (an uncordon, a pod
    gone, a new node) reaches kube-scheduler and the extender's watch at about the same time:
    when kube-scheduler retries first, the extender still refuses, and the pod waits for the
    next cluster event (a real cluster has plenty; this one none) or kube-scheduler's 5-minute
    flush. The touch is that next event."""
    deadline = time.monotonic() + 60
    touched = 0
    while True:
        items = kc.api.get(f"/api/v1/namespaces/{ns}/pods").json()["items"]
        got = sorted(
            p["metadata"]["name"]
            for p in items
            if p["spec"].get("nodeName") and p["metadata"]["name"] != exclude
        )
        if len(got) >= n:
            return got
        assert time.monotonic() < deadline, f"{got} bound\n{kc.log('kube-scheduler')[-3000:]}"
        time.sleep(2.5)
        touched += 1
        annotate_node(kc, node, {"xpupool-test/touched": str(touched)})


def unbound_for(kc: K8sCluster, names: list[str], seconds: float, ns: str = NS) -> None:
    """None of ``names`` is bound during ``seconds`` (kube-scheduler retries them meanwhile)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in names:
            got = kc.api.get(f"/api/v1/namespaces/{ns}/pods/{name}").json()
            assert not got["spec"].get("nodeName"), f"{name} bound to {got['spec']['nodeName']}"
        time.sleep(0.5)


def test_cordoned_cards_take_no_new_pod_until_uncordoned(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    both = "GPU-cordon-a-0, GPU-cordon-a-1"  # HAMi trims each item
    add_nodes(kc, node("cordon-a", [(0, "hami-core"), (0, "hami-core")], {CORDON: both}))
    try:
        names = [f"cordon-{i}" for i in range(3)]
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
        create(kc, *(gpu_pod(n, limits) for n in names))
        why = reasons(kc, names[0])
        assert "xpupool:" in why and "cordoned" in why, why
        unbound_for(kc, names, 3)
        annotate_node(kc, "cordon-a", {CORDON: "GPU-cordon-a-0"})  # card 1 back in service
        nudged(kc, "cordon-a", NS, len(names))
        pods = bound(kc, names)
        assert {uuid for p in pods.values() for uuid, _, _ in shares(p)} == {"GPU-cordon-a-1"}
    finally:
        delete_pods(kc)
        remove_nodes(kc, "cordon-a")


def test_vgpu_mode_takes_cards_of_that_mode_and_mig_waits_for_an_instance(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    add_nodes(kc, node("mode-core", [(0, "hami-core"), (0, "hami-core")]))
    try:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
        mode = "nvidia.com/vgpu-mode"
        create(
            kc,
            gpu_pod("want-core", limits, {mode: "hami-core"}),
            gpu_pod("want-mps", limits, {mode: "mps"}),
            gpu_pod("want-mig", limits, {mode: "mig"}),
        )
        assert bound(kc, ["want-core"])["want-core"]["spec"]["nodeName"] == "mode-core"
        why = reasons(kc, "want-mps")
        assert "xpupool:" in why and "mode" in why, why
        why = reasons(kc, "want-mig")
        assert "xpupool:" in why and "partition" in why, why
        unbound_for(kc, ["want-mps", "want-mig"], 3)
        add_nodes(kc, node("mode-mps", [(0, "mps")]))  # an MPS card: the mps pod goes there
        nudged(kc, "mode-mps", NS, 2)
        assert bound(kc, ["want-mps"])["want-mps"]["spec"]["nodeName"] == "mode-mps"
        assert not pod(kc, "want-mig")["spec"].get("nodeName")
    finally:
        delete_pods(kc)
        remove_nodes(kc, "mode-core", "mode-mps")


def test_numa_bind_keeps_a_containers_cards_on_one_numa_node(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    cards = [(0, "hami-core")] * 4 + [(1, "hami-core")] * 4  # cards 0-3 on NUMA 0, 4-7 on 1
    add_nodes(kc, node("numa-a", cards))
    bind = {"nvidia.com/numa-bind": "true"}
    try:
        create(kc, gpu_pod("numa-five", {"nvidia.com/gpu": "5"}, bind))
        why = reasons(kc, "numa-five")  # 5 cards, 4 a NUMA node: HAMi's NumaNotFit
        assert "xpupool:" in why and "NUMA" in why, why
        unbound_for(kc, ["numa-five"], 3)
        create(kc, gpu_pod("numa-small", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}))
        small = bound(kc, ["numa-small"])["numa-small"]
        (taken, _, _), *_ = shares(small)
        free_numa = 1 - int(taken.rsplit("-", 1)[1]) // 4  # the NUMA node with 4 whole cards
        create(kc, gpu_pod("numa-four", {"nvidia.com/gpu": "4"}, bind))
        four = bound(kc, ["numa-four"])["numa-four"]
        used = sorted(uuid for uuid, _, _ in shares(four))
        assert used == [f"GPU-numa-a-{i}" for i in range(4 * free_numa, 4 * free_numa + 4)], used
    finally:
        delete_pods(kc)
        remove_nodes(kc, "numa-a")


def test_namespace_quota_on_card_memory_caps_what_its_pods_hold(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    add_nodes(kc, node("quota-a", [(0, "hami-core"), (0, "hami-core")]))
    path = f"/api/v1/namespaces/{QUOTA_NS}"
    r = kc.api.post("/api/v1/namespaces", json={"metadata": {"name": QUOTA_NS}})
    assert r.status_code == 201, r.text
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "cards", "namespace": QUOTA_NS},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
    }
    r = kc.api.post(f"{path}/resourcequotas", json=quota)
    assert r.status_code == 201, r.text
    try:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
        names = [f"quota-{i}" for i in range(4)]
        for name in names:
            body = gpu_pod(name, limits)
            body["metadata"]["namespace"] = QUOTA_NS
            r = kc.api.post(f"{path}/pods", json=body)
            assert r.status_code == 201, r.text
        placed = _bound_in(kc, QUOTA_NS, 2)
        time.sleep(3)  # a third would break the quota: give it time to show
        placed = _bound_in(kc, QUOTA_NS, 2)
        assert len(placed) == 2, sorted(placed)  # 16,000 of 20,000 MiB
        waiting = sorted(set(names) - set(placed))
        why = _events(kc, QUOTA_NS, waiting[0])
        assert "xpupool:" in why and "quota" in why and "nvidia.com/gpumem" in why, why
        other = gpu_pod("no-quota-here", limits)  # another namespace: not capped
        create(kc, other)
        bound(kc, ["no-quota-here"])
        kc.api.delete(f"{path}/pods/{placed[0]}", params={"gracePeriodSeconds": "0"})
        after = nudged(kc, "quota-a", QUOTA_NS, 2, exclude=placed[0])  # its 8,000 MiB are free
        assert placed[0] not in after and len(after) == 2, after
    finally:
        delete_pods(kc)
        kc.api.delete(path)
        remove_nodes(kc, "quota-a")


def _bound_in(
    kc: K8sCluster, ns: str, n: int, exclude: str = "", timeout_s: float = 60
) -> list[str]:
    """The names of the pods of ``ns`` bound, once at least ``n`` are (``exclude`` not counted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        items = kc.api.get(f"/api/v1/namespaces/{ns}/pods").json()["items"]
        got = sorted(
            p["metadata"]["name"]
            for p in items
            if p["spec"].get("nodeName") and p["metadata"]["name"] != exclude
        )
        if len(got) >= n:
            return got
        assert time.monotonic() < deadline, f"{got} bound\n{kc.log('kube-scheduler')[-3000:]}"
        time.sleep(0.2)


def _events(kc: K8sCluster, ns: str, name: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = kc.api.get(
            f"/api/v1/namespaces/{ns}/events",
            params={"fieldSelector": f"involvedObject.name={name}"},
        )
        text = " | ".join(e.get("message", "") for e in r.json()["items"])
        if "FailedScheduling" in json.dumps(r.json()) and text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"no FailedScheduling event for {ns}/{name}")
