"""xpupool's extender behind a real kube-scheduler (v1.36) on a real kube-apiserver: pods written as
HAMi users write them land on nodes and cards that hold them, with the annotations HAMi's device
plugin reads; shares never over-commit a card, also when 200 pods come at once; a pod that fits
nowhere says why in its events; a restarted extender rebuilds what every pod holds from the pods.

Nodes carry HAMi's registration annotation (``hami.io/node-nvidia-register``), as a cluster that
runs HAMi's device plugin has them; nothing here runs a kubelet (pods stay Pending once bound,
which is all a scheduler test needs).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import Extender, ExtenderProcess, K8sCluster, extender_stack, free_port

pytestmark = pytest.mark.k8s

MANAGED = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
A100 = ("NVIDIA A100-SXM4-80GB", 81920)
T4 = ("NVIDIA Tesla T4", 15360)
H100 = ("NVIDIA H100 80GB HBM3", 81920)
NS = "default"


def every_verb(port: int, *, preempt: bool = True, prioritize: bool = True) -> Extender:
    """kube-scheduler's configuration of an extender on ``port`` with every verb and HAMi's
    resources, as the chart configures it; a test that is not about preemption (or scoring) may
    leave that verb out."""
    return Extender(
        url_prefix=f"http://127.0.0.1:{port}",
        preempt_verb="preempt" if preempt else None,
        prioritize_verb="prioritize" if prioritize else None,
        weight=10,
        http_timeout="10s",
        managed_resources=MANAGED,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    with extender_stack(tmp_path_factory.mktemp("extender"), port, every_verb(port)) as both:
        yield both


def hami_node(name: str, model: tuple[str, int], cards: int, split: int = 10) -> dict[str, Any]:
    kind, mib = model
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": split,
            "devmem": mib,
            "devcore": 100,
            "type": kind,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(cards)
    ]
    resources = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "500",
        "nvidia.com/gpu": str(cards * split),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "xpupool-test": "e2e"},
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def gpu_pod(
    name: str, limits: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "xpupool-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def add_nodes(kc: K8sCluster, *nodes: dict[str, Any]) -> None:
    for node in nodes:
        r = kc.api.post("/api/v1/nodes", json=node)
        assert r.status_code == 201, r.text


def remove_nodes(kc: K8sCluster, *names: str) -> None:
    for name in names:
        kc.api.delete(f"/api/v1/nodes/{name}")


def create(kc: K8sCluster, *pods: dict[str, Any]) -> None:
    for pod in pods:
        r = kc.api.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
        assert r.status_code == 201, r.text


def delete_pods(kc: K8sCluster) -> None:
    kc.api.delete(f"/api/v1/namespaces/{NS}/pods", params={"gracePeriodSeconds": "0"})
    deadline = time.monotonic() + 30
    while kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]:
        assert time.monotonic() < deadline, "pods not deleted"
        time.sleep(0.1)


def pod(kc: K8sCluster, name: str) -> dict[str, Any]:
    r = kc.api.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    r.raise_for_status()
    return dict(r.json())


def bound(kc: K8sCluster, names: list[str], timeout_s: float = 60) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        items = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
        got = {p["metadata"]["name"]: p for p in items if p["spec"].get("nodeName")}
        if all(n in got for n in names):
            return {n: got[n] for n in names}
        if time.monotonic() > deadline:
            missing = sorted(set(names) - set(got))
            raise AssertionError(f"not bound: {missing[:10]}\n{kc.log('kube-scheduler')[-3000:]}")
        time.sleep(0.2)


def shares(p: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(card UUID, MiB, cores %) per device of the pod's HAMi allocation annotation."""
    text = p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    out = []
    for container in text.split(";"):
        for dev in container.split(":"):
            if dev:
                uuid, _type, mem, cores = dev.split(",")
                out.append((uuid, int(mem), int(cores)))
    return out


def refused(kc: K8sCluster, name: str, timeout_s: float = 60) -> str:
    """The pod's FailedScheduling text once kube-scheduler has tried it; fails if it was bound."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert not pod(kc, name)["spec"].get("nodeName"), f"{name} was bound"
        params = {"fieldSelector": f"involvedObject.name={name},reason=FailedScheduling"}
        items = kc.api.get(f"/api/v1/namespaces/{NS}/events", params=params).json()["items"]
        if items:
            return " | ".join(e.get("message", "") for e in items)
        time.sleep(0.3)
    raise AssertionError(f"{name}: neither bound nor refused in {timeout_s:.0f} s")


def reasons(kc: K8sCluster, name: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = kc.api.get(
            f"/api/v1/namespaces/{NS}/events",
            params={"fieldSelector": f"involvedObject.name={name}"},
        )
        text = " | ".join(e.get("message", "") for e in r.json()["items"])
        if "FailedScheduling" in json.dumps(r.json()) and text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"no FailedScheduling event for {name}")


def check_no_overcommit(kc: K8sCluster, pods: dict[str, dict[str, Any]], card_mib: int) -> None:
    used: dict[str, int] = defaultdict(int)
    cores: dict[str, int] = defaultdict(int)
    for p in pods.values():
        node = p["spec"]["nodeName"]
        for uuid, mib, pct in shares(p):
            assert uuid.startswith(f"GPU-{node}-"), (uuid, node)  # a card of its own node
            used[uuid] += mib
            cores[uuid] += pct
    assert max(used.values()) <= card_mib, dict(used)
    assert max(cores.values()) <= 100, dict(cores)


def test_fractional_pods_share_cards_without_overcommit(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, _ = stack
    add_nodes(kc, hami_node("frac-a", A100, 2), hami_node("frac-b", A100, 2))
    try:
        names = [f"frac-{i}" for i in range(8)]
        create(
            kc,
            *(gpu_pod(n, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}) for n in names),
        )
        pods = bound(kc, names)
        check_no_overcommit(kc, pods, A100[1])
        cards = {uuid for p in pods.values() for uuid, _, _ in shares(p)}
        assert len(cards) == 4  # two 30 GB shares per 80 GB card: every card used, none thrice
        for p in pods.values():
            ann = p["metadata"]["annotations"]
            assert ann["hami.io/vgpu-node"] == p["spec"]["nodeName"]
            assert ann["hami.io/bind-phase"] == "allocating"
            assert ann["hami.io/vgpu-devices-to-allocate"] == ann["hami.io/vgpu-devices-allocated"]
        create(kc, gpu_pod("frac-late", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}))
        why = reasons(kc, "frac-late")
        assert "xpupool:" in why and "memory" in why, why
    finally:
        delete_pods(kc)
        remove_nodes(kc, "frac-a", "frac-b")


def test_type_include_and_exclude(stack: tuple[K8sCluster, ExtenderProcess]) -> None:
    kc, _ = stack
    add_nodes(kc, hami_node("type-a100", A100, 1), hami_node("type-t4", T4, 1))
    try:
        create(
            kc,
            gpu_pod("want-a100", {"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "A100"}),
            gpu_pod("not-a100", {"nvidia.com/gpu": "1"}, {"nvidia.com/nouse-gputype": "A100"}),
        )
        pods = bound(kc, ["want-a100", "not-a100"])
        assert pods["want-a100"]["spec"]["nodeName"] == "type-a100"
        assert pods["not-a100"]["spec"]["nodeName"] == "type-t4"
    finally:
        delete_pods(kc)
        remove_nodes(kc, "type-a100", "type-t4")


def test_type_tokens_are_substrings_of_the_registered_type(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """HAMi's ``CheckType``: ``Tesla`` is in the T4's type string only, so ``use-gputype: Tesla``
    lands on the T4, never the H100, and ``nouse-gputype: Tesla`` leaves only the H100 (issue 56:
    through the catalog, the first went anywhere and the second was refused)."""
    kc, _ = stack
    add_nodes(kc, hami_node("tesla-h100", H100, 1), hami_node("tesla-t4", T4, 1))
    try:
        create(
            kc,
            gpu_pod("want-tesla", {"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "Tesla"}),
            gpu_pod("not-tesla", {"nvidia.com/gpu": "1"}, {"nvidia.com/nouse-gputype": "tesla"}),
        )
        pods = bound(kc, ["want-tesla", "not-tesla"])
        assert pods["want-tesla"]["spec"]["nodeName"] == "tesla-t4"
        assert pods["not-tesla"]["spec"]["nodeName"] == "tesla-h100"
    finally:
        delete_pods(kc)
        remove_nodes(kc, "tesla-h100", "tesla-t4")


def test_a_pod_that_fits_nowhere_says_why(stack: tuple[K8sCluster, ExtenderProcess]) -> None:
    kc, _ = stack
    add_nodes(kc, hami_node("small-a", T4, 2))
    try:
        create(kc, gpu_pod("too-big", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}))
        why = reasons(kc, "too-big")
        assert "xpupool:" in why, why
        assert not pod(kc, "too-big")["spec"].get("nodeName")
    finally:
        delete_pods(kc)
        remove_nodes(kc, "small-a")


def test_two_hundred_pods_at_once_never_share_a_slot_twice(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """200 pods of 15 % of a card, created at once, on 32 cards that hold six each: exactly 192
    bind, no card holds more than 90 %, and the last 8 wait with xpupool's reason."""
    kc, _ = stack
    nodes = [f"burst-{i}" for i in range(4)]
    add_nodes(kc, *(hami_node(n, A100, 8) for n in nodes))
    try:
        names = [f"burst-pod-{i}" for i in range(200)]
        limits = {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem-percentage": "15",
            "nvidia.com/gpucores": "15",
        }
        create(kc, *(gpu_pod(n, limits) for n in names))
        deadline = time.monotonic() + 180
        while True:
            items = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
            placed = {p["metadata"]["name"]: p for p in items if p["spec"].get("nodeName")}
            if len(placed) >= 192 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        time.sleep(2)  # anything more would be an over-commit: give it time to show
        items = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
        placed = {p["metadata"]["name"]: p for p in items if p["spec"].get("nodeName")}
        assert len(placed) == 192, len(placed)
        check_no_overcommit(kc, placed, A100[1])
        per_card: dict[str, int] = defaultdict(int)
        for p in placed.values():
            for uuid, _, _ in shares(p):
                per_card[uuid] += 1
        assert sorted(set(per_card.values())) == [6] and len(per_card) == 32
        waiting = sorted(set(names) - set(placed))
        why = reasons(kc, waiting[0])
        assert "xpupool:" in why, why
    finally:
        delete_pods(kc)
        remove_nodes(kc, *nodes)


def test_a_restarted_extender_rebuilds_what_pods_hold(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, proc = stack
    add_nodes(kc, hami_node("restart-a", A100, 1))
    try:
        create(kc, gpu_pod("first", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "50000"}))
        bound(kc, ["first"])
        proc.stop()
        proc.start()  # knows nothing but what the cluster says
        create(kc, gpu_pod("second", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "50000"}))
        why = reasons(kc, "second")  # 50 + 50 GB do not fit one 80 GB card
        assert "xpupool:" in why, why
        create(kc, gpu_pod("third", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}))
        pods = bound(kc, ["first", "third"])
        check_no_overcommit(kc, pods, A100[1])
    finally:
        delete_pods(kc)
        remove_nodes(kc, "restart-a")


def priority_class(kc: K8sCluster, name: str, value: int) -> None:
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    r = kc.api.post("/apis/scheduling.k8s.io/v1/priorityclasses", json=body)
    assert r.status_code in (201, 409), r.text


def test_preempt_names_the_victims_whose_shares_the_pod_needs(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """kube-scheduler sees no card shares; the extender's preempt verb does. On one 80 GB card
    holding a 50 GB and a 20 GB low-priority pod, a 40 GB high-priority pod needs the 50 GB one
    evicted and only it: whatever kube-scheduler proposes, that is the answer."""
    kc, proc = stack
    priority_class(kc, "xp-low", 100)
    priority_class(kc, "xp-high", 1000)
    add_nodes(kc, hami_node("preempt-a", A100, 1))
    try:
        low = {"priorityClassName": "xp-low"}
        big = gpu_pod("low-big", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "50000"})
        small = gpu_pod("low-small", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"})
        big["spec"].update(low)
        small["spec"].update(low)
        create(kc, big, small)
        held = bound(kc, ["low-big", "low-small"])
        uid = {n: p["metadata"]["uid"] for n, p in held.items()}
        high = gpu_pod("high", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"})
        high["spec"]["priorityClassName"] = "xp-high"
        high["spec"]["schedulerName"] = "nobody"  # kept out of the scheduler: asked by hand
        create(kc, high)
        high_obj = pod(kc, "high")
        assert high_obj["spec"]["priority"] == 1000

        def ask(victims: list[str]) -> dict[str, Any]:
            body = {
                "Pod": high_obj,
                "NodeNameToVictims": None,
                "NodeNameToMetaVictims": {
                    "preempt-a": {
                        "Pods": [{"UID": uid[v]} for v in victims],
                        "NumPDBViolations": 0,
                    }
                },
            }
            r = httpx.post(f"http://127.0.0.1:{proc.port}/preempt", json=body, timeout=10)
            assert r.status_code == 200, r.text
            return dict(r.json())

        want = {"preempt-a": {"Pods": [{"UID": uid["low-big"]}], "NumPDBViolations": 0}}
        assert ask(["low-big", "low-small"])["NodeNameToMetaVictims"] == want
        assert ask(["low-small"])["NodeNameToMetaVictims"] == want  # not enough: the engine adds
        high_obj["spec"]["priority"] = 50  # below both: nobody may be evicted for it
        assert ask(["low-big", "low-small"])["NodeNameToMetaVictims"] in ({}, None)
    finally:
        delete_pods(kc)
        remove_nodes(kc, "preempt-a")


def low_pod(name: str, mib: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A low-priority pod holding ``mib`` of one card; with no kubelet here, a grace period of 0
    lets an eviction delete it at once (a kubelet would stop it first)."""
    p = gpu_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)})
    p["spec"].update(priorityClassName="xp-low", terminationGracePeriodSeconds=0)
    p["metadata"]["labels"] = labels or {}
    return p


def gone(kc: K8sCluster, name: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while kc.api.get(f"/api/v1/namespaces/{NS}/pods/{name}").status_code != 404:
        assert time.monotonic() < deadline, (
            f"{name} still there\n{kc.log('kube-scheduler')[-2000:]}"
        )
        time.sleep(0.2)


def test_a_high_priority_pod_evicts_only_the_pods_whose_shares_it_needs(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """End to end through kube-scheduler, which sees no card shares and so never preempts for
    them: on one 80 GB card holding a 50 GB and a 20 GB low-priority pod, a 40 GB high-priority
    pod is short of card memory only. The extender's planner names the 50 GB pod alone, evicts it
    through the Eviction API and binds the high-priority pod in its place; the 20 GB pod and a
    pod of the high one's priority on the same card are never touched."""
    kc, _ = stack
    priority_class(kc, "xp-low", 100)
    priority_class(kc, "xp-high", 1000)
    add_nodes(kc, hami_node("evict-a", A100, 1))
    try:
        create(kc, low_pod("low-big", 50000), low_pod("low-small", 20000))
        bound(kc, ["low-big", "low-small"])
        peer = gpu_pod("peer", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"})
        peer["spec"]["priorityClassName"] = "xp-high"
        create(kc, peer)
        bound(kc, ["peer"])
        high = gpu_pod("high", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"})
        high["spec"]["priorityClassName"] = "xp-high"
        create(kc, high)
        gone(kc, "low-big")
        pods = bound(kc, ["high", "low-small", "peer"])
        assert pods["high"]["spec"]["nodeName"] == "evict-a"
        check_no_overcommit(kc, pods, A100[1])
        events = reasons(kc, "high")
        assert "preempting 1 lower-priority pod(s) on evict-a: default/low-big" in events, events
    finally:
        delete_pods(kc)
        remove_nodes(kc, "evict-a")


def test_a_refused_eviction_leaves_the_victim_charged(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """A PodDisruptionBudget covering the only (running) victim makes the Eviction API refuse (429): the
    victim keeps its shares (a later pod cannot take them), the high-priority pod waits and
    says why, and nothing was deleted."""
    kc, _ = stack
    priority_class(kc, "xp-low", 100)
    priority_class(kc, "xp-high", 1000)
    add_nodes(kc, hami_node("evict-b", A100, 1))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keep"}}},
    }
    r = kc.api.post(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", json=pdb)
    assert r.status_code == 201, r.text
    try:
        create(kc, low_pod("kept", 60000, {"app": "keep"}))
        bound(kc, ["kept"])
        # the Eviction API lets a Pending pod go whatever its budget says: make it Running, as
        # its kubelet would
        r = kc.api.patch(
            f"/api/v1/namespaces/{NS}/pods/kept/status",
            json={"status": {"phase": "Running"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
        high = gpu_pod("high-b", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"})
        high["spec"]["priorityClassName"] = "xp-high"
        create(kc, high)
        deadline = time.monotonic() + 30
        while "evicting default/kept" not in (events := reasons(kc, "high-b")):
            assert time.monotonic() < deadline, events
            time.sleep(0.5)
        assert "disruption budget" in events, events
        assert not pod(kc, "high-b")["spec"].get("nodeName")
        assert pod(kc, "kept")["metadata"].get("deletionTimestamp") is None
        # the victim still holds its 60 GB: a 30 GB pod of its own priority does not fit
        create(kc, low_pod("after", 30000))
        assert "insufficient" in reasons(kc, "after").lower() or "memory" in reasons(kc, "after")
        assert not pod(kc, "after")["spec"].get("nodeName")
    finally:
        kc.api.delete(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/keep")
        delete_pods(kc)
        remove_nodes(kc, "evict-b")


def test_metrics_count_the_calls_by_verb_and_outcome(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, proc = stack
    r = httpx.post(f"http://127.0.0.1:{proc.port}/filter", content=b"{not json", timeout=5)
    assert r.status_code == 400 and "ExtenderArgs" in r.text
    add_nodes(kc, hami_node("metrics-a", A100, 1))
    try:
        create(kc, gpu_pod("metered", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}))
        bound(kc, ["metered"])
        text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5).text
        for line in (
            'xpupool_extender_calls_total{outcome="ok",verb="filter"}',
            'xpupool_extender_calls_total{outcome="ok",verb="bind"}',
            'xpupool_extender_calls_total{outcome="bad_request",verb="filter"}',
        ):
            assert line in text, text[:3000]
        assert 'xpupool_extender_call_seconds_bucket{le="0.05",verb="filter"}' in text
        # stranded capacity for the workload learned from the pods it placed (the server's
        # gauges), once its learner has re-learned (between verbs, k8s/extender/learner.py)
        wanted = [
            f'xpupool_node_stranded_device_{n}{{node="metrics-a",'
            for n in ("memory_bytes", "cores")
        ]
        deadline = time.monotonic() + 20
        while not all(w in text for w in wanted):
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.2)
            text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5).text
    finally:
        delete_pods(kc)
        remove_nodes(kc, "metrics-a")


def test_two_replicas_with_leader_election_one_answers(
    stack: tuple[K8sCluster, ExtenderProcess], tmp_path: Path
) -> None:
    """Two extenders on one Lease: one is ready and answers, the other is a standby that is not
    ready and answers every verb with Error; when the leader stops it gives the Lease up and the
    standby takes over."""
    kc, _ = stack
    lease = ("--leader-elect", "default/xpupool-extender-test")
    a = ExtenderProcess(kc.kubeconfig, free_port(), tmp_path / "a.log", (*lease, "--identity", "a"))
    b = ExtenderProcess(kc.kubeconfig, free_port(), tmp_path / "b.log", (*lease, "--identity", "b"))
    try:
        a.start()  # ready: it holds the Lease
        b.start(wait_ready=False)
        time.sleep(3)  # b campaigns and finds a holding it
        assert a.ready() and not b.ready()
        body = {"Pod": gpu_pod("x", {"nvidia.com/gpu": "1"}), "Nodes": None, "NodeNames": ["n"]}
        answer = httpx.post(f"http://127.0.0.1:{b.port}/filter", json=body, timeout=5).json()
        assert "standby" in answer["Error"]
        holder = kc.api.get(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/xpupool-extender-test"
        ).json()["spec"]["holderIdentity"]
        assert holder == "a"
        a.stop()
        deadline = time.monotonic() + 20
        while not b.ready():
            assert time.monotonic() < deadline, b.log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        a.stop()
        b.stop()
