"""HAMi's node lock (``hami.io/mutex.lock``) around xpupool's binds, on a real kube-apiserver and
kube-scheduler with xpupool's extender (``--hami-node-lock auto``), issue 56.

HAMi's device plugin learns which pod a kubelet ``Allocate`` is for from the node's lock, and only
without one from the first Pending pod of the node in name order whose ``hami.io/bind-phase`` is
``allocating`` or ``success`` (HAMi v2.10.0 ``pkg/util/util.go`` ``GetPendingPod``); after
allocating it sets ``success`` and deletes the lock if it names the pod it served
(``nodelock.ReleaseNodeLock`` with the owner check). :class:`DevicePluginStandIn` plays the
kubelet (admitting pods in the order they were bound to its node, each after a delay) and that
device plugin, by HAMi's documented rule. Without the lock, pods bound close together are served
out of name order: an admission gets another pod's cards, or none.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from cluster import (
    ExtenderProcess,
    K8sCluster,
    extender_stack,
    free_port,
    make_api_client,
)
from test_extender_e2e import A100, NS, add_nodes, every_verb, gpu_pod, hami_node

pytestmark = pytest.mark.k8s

LOCK = "hami.io/mutex.lock"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
VGPU_NODE = "hami.io/vgpu-node"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HAMI_LOCK_FORMAT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ,(?P<ns>[^,]+),(?P<pod>[^,]+)\Z")
WAIT_S = 8.0  # the extender's --hami-node-lock-wait, under the 10 s httpTimeout


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    ext = every_verb(port)
    extra = ("--hami-node-lock-wait", str(WAIT_S))
    log_dir = tmp_path_factory.mktemp("node-lock")
    with extender_stack(log_dir, port, ext, extra, node_lock="auto") as both:
        yield both


@dataclass(frozen=True)
class Admission:
    """One kubelet Allocate: the pod admitted, the pod the device plugin found, the cards it
    handed out (that pod's to-allocate annotation) and the lock it read."""

    admitted: str
    served: str | None  # None: "no binding pod found"
    cards: str
    lock: str | None


class DevicePluginStandIn:
    """The kubelet and HAMi's device plugin of one node: watches pods bound to ``node``, admits
    them in bind order ``delay_s`` after each is seen, and per admission finds the pod by HAMi's
    ``GetPendingPod`` rule, records it, sets its ``bind-phase`` to ``success`` and releases the
    lock if it names that pod."""

    def __init__(self, kc: K8sCluster, node: str, delay_s: float) -> None:
        self.api = make_api_client(kc.api_url)
        self.node, self.delay_s = node, delay_s
        self.admissions: list[Admission] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DevicePluginStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()

    def wait_for(self, n: int, timeout_s: float = 60.0) -> list[Admission]:
        deadline = time.monotonic() + timeout_s
        while len(self.admissions) < n and time.monotonic() < deadline and self.error is None:
            time.sleep(0.05)
        assert self.error is None, self.error
        return list(self.admissions)

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{NS}/pods"
        selector = {"fieldSelector": f"spec.nodeName={self.node}"}
        seen: set[str] = set()
        try:
            version = self.api.get(path, params=selector).json()["metadata"]["resourceVersion"]
            while not self._stop.is_set():
                params = {**selector, "watch": "1", "resourceVersion": version}
                with self.api.stream("GET", path, params={**params, "timeoutSeconds": "1"}) as r:
                    for line in r.iter_lines():
                        if not line:
                            continue
                        obj = json.loads(line)["object"]
                        version = obj["metadata"]["resourceVersion"]
                        name = obj["metadata"]["name"]
                        if name not in seen:  # newly bound here: the kubelet admits it
                            seen.add(name)
                            time.sleep(self.delay_s)
                            self._allocate(name)
        except BaseException as exc:  # handed to the test by wait_for
            self.error = exc

    def _allocate(self, admitted: str) -> None:
        node = self.api.get(f"/api/v1/nodes/{self.node}").json()
        lock = (node["metadata"].get("annotations") or {}).get(LOCK)
        served = self._pending_pod(lock)
        if served is None:
            self.admissions.append(Admission(admitted, None, "", lock))
            return
        meta = served["metadata"]
        cards = (meta.get("annotations") or {}).get(TO_ALLOCATE, "")
        self.admissions.append(Admission(admitted, meta["name"], cards, lock))
        patch = {"metadata": {"annotations": {BIND_PHASE: "success"}}}
        self._merge(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", patch)
        release_lock(self.api, self.node, f",{meta['namespace']},{meta['name']}")

    def _pending_pod(self, lock: str | None) -> dict[str, Any] | None:
        """HAMi's GetPendingPod: the lock's owner; else the first Pending pod of the node, in
        the apiserver's list order (namespace, then name), with a bind time, a bind-phase of
        allocating or success, and this node in hami.io/vgpu-node."""
        if lock is not None:
            _, ns, name = lock.split(",")
            r = self.api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            return r.json() if r.status_code == 200 else None
        pods = self.api.get(
            "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self.node}"}
        ).json()["items"]
        for pod in pods:
            ann = pod["metadata"].get("annotations") or {}
            if (
                pod["status"].get("phase") == "Pending"
                and BIND_TIME in ann
                and ann.get(BIND_PHASE) in ("allocating", "success")
                and ann.get(VGPU_NODE) == self.node
            ):
                return pod
        return None

    def _merge(self, path: str, patch: dict[str, Any]) -> None:
        r = self.api.patch(
            path,
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        r.raise_for_status()


def release_lock(api: httpx.Client, node: str, owner: str) -> bool:
    """HAMi's ReleaseNodeLock with its owner check: delete the lock if it ends with ``owner``
    (``,<namespace>,<pod>``), guarded by the node's resourceVersion; a conflict is read again."""
    for _ in range(10):
        meta = api.get(f"/api/v1/nodes/{node}").json()["metadata"]
        value = (meta.get("annotations") or {}).get(LOCK)
        if value is None or not value.endswith(owner):
            return False
        patch = {
            "metadata": {"annotations": {LOCK: None}, "resourceVersion": meta["resourceVersion"]}
        }
        r = api.patch(
            f"/api/v1/nodes/{node}",
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if r.status_code != 409:
            r.raise_for_status()
            return True
    raise AssertionError(f"releasing the lock on {node} kept conflicting")


def set_lock(kc: K8sCluster, node: str, value: str | None) -> None:
    r = kc.api.patch(
        f"/api/v1/nodes/{node}",
        content=json.dumps({"metadata": {"annotations": {LOCK: value}}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    r.raise_for_status()


def node_lock(kc: K8sCluster, node: str) -> str | None:
    return (kc.api.get(f"/api/v1/nodes/{node}").json()["metadata"].get("annotations") or {}).get(
        LOCK
    )


def pinned_pod(name: str, node: str, percent: int) -> dict[str, Any]:
    """A pod of one card at ``percent`` % of its memory, pinned to ``node``."""
    pod = gpu_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": str(percent)})
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def unscheduled_pod(name: str) -> dict[str, Any]:
    """A pod no scheduler serves: it exists, stays Pending and unbound (a lock's live owner)."""
    pod = gpu_pod(name, {"nvidia.com/gpu": "1"})
    pod["spec"]["schedulerName"] = "nobody"
    return pod


def create(kc: K8sCluster, pod: dict[str, Any]) -> None:
    r = kc.api.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
    assert r.status_code == 201, r.text


def bound_node(kc: K8sCluster, name: str) -> str | None:
    r = kc.api.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    return r.json()["spec"].get("nodeName") if r.status_code == 200 else None


def wait_bound(kc: K8sCluster, name: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        node = bound_node(kc, name)
        if node:
            return node
        time.sleep(0.05)
    raise AssertionError(f"{name} not bound in {timeout_s:.0f} s")


def assert_served_their_own(admissions: list[Admission], names: list[str]) -> None:
    """Every admission found its own pod, through a lock in HAMi's format that named it, and
    handed out that pod's cards; every pod was admitted once."""
    assert sorted(a.admitted for a in admissions) == sorted(names)
    wrong = [(a.admitted, a.served) for a in admissions if a.served != a.admitted]
    assert wrong == [], f"admissions served another pod (admitted, served): {wrong}"
    for a in admissions:
        assert a.lock is not None, f"{a.admitted} was admitted with no lock on the node"
        match = HAMI_LOCK_FORMAT.match(a.lock)
        assert match is not None, a.lock
        assert (match["ns"], match["pod"]) == (NS, a.admitted)
        assert a.cards.startswith("GPU-"), a.cards


def test_pods_bound_together_are_each_served_their_own_cards(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """Four pods created at once for one node, names in reverse order of creation: each kubelet
    admission is served the pod it admits (before the lock: by name order, the wrong ones)."""
    kc, _ = stack
    add_nodes(kc, hami_node("lock-together", A100, 4))
    names = ["together-d", "together-c", "together-b", "together-a"]
    with DevicePluginStandIn(kc, "lock-together", delay_s=0.3) as plugin:
        for i, name in enumerate(names):
            create(kc, pinned_pod(name, "lock-together", 20 + 5 * i))
        admissions = plugin.wait_for(len(names))
    assert_served_their_own(admissions, names)
    deadline = time.monotonic() + 5
    while node_lock(kc, "lock-together") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node_lock(kc, "lock-together") is None  # the last release left the node unlocked


def test_pods_bound_one_after_another_are_each_served_their_own_cards(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """A pod created once the previous one is bound, while its admission is still to come."""
    kc, _ = stack
    add_nodes(kc, hami_node("lock-sequence", A100, 4))
    names = ["sequence-b", "sequence-a"]
    with DevicePluginStandIn(kc, "lock-sequence", delay_s=1.0) as plugin:
        for name in names:
            create(kc, pinned_pod(name, "lock-sequence", 30))
            wait_bound(kc, name)
        admissions = plugin.wait_for(len(names))
    assert_served_their_own(admissions, names)


def test_a_bind_to_a_locked_node_waits_for_the_release(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """Another pod's live lock holds the bind (it is not answered, nor the pod bound) until the
    lock goes; then the pod binds at once, under its own lock in HAMi's format."""
    kc, _ = stack
    add_nodes(kc, hami_node("lock-wait", A100, 2))
    create(kc, unscheduled_pod("holder-wait"))
    held = f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ},{NS},holder-wait"
    set_lock(kc, "lock-wait", held)
    create(kc, pinned_pod("waiter", "lock-wait", 25))
    time.sleep(2.0)
    assert bound_node(kc, "waiter") is None  # held while the lock is another pod's
    assert node_lock(kc, "lock-wait") == held
    assert release_lock(kc.api, "lock-wait", f",{NS},holder-wait")
    assert wait_bound(kc, "waiter", timeout_s=WAIT_S + 15) == "lock-wait"
    lock = node_lock(kc, "lock-wait")
    assert lock is not None and HAMI_LOCK_FORMAT.match(lock), lock
    assert lock.endswith(f",{NS},waiter")
    set_lock(kc, "lock-wait", None)


def test_a_failed_bind_leaves_no_lock_behind(stack: tuple[K8sCluster, ExtenderProcess]) -> None:
    """A bind waiting on a locked node whose pod is deleted meanwhile: once the lock is free it
    takes the lock, its annotation patch fails (the pod is gone), and it releases the lock."""
    kc, _ = stack
    add_nodes(kc, hami_node("lock-fail", A100, 2))
    create(kc, unscheduled_pod("holder-fail"))
    set_lock(kc, "lock-fail", f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ},{NS},holder-fail")
    seen: list[str | None] = []
    watcher = NodeLockWatcher(kc, "lock-fail", seen).start()
    try:
        create(kc, pinned_pod("doomed", "lock-fail", 25))
        time.sleep(1.5)  # its bind now waits on the lock
        r = kc.api.delete(f"/api/v1/namespaces/{NS}/pods/doomed", params={"gracePeriodSeconds": 0})
        assert r.status_code == 200, r.text
        assert release_lock(kc.api, "lock-fail", f",{NS},holder-fail")
        deadline = time.monotonic() + WAIT_S + 5
        while not any(v and v.endswith(",doomed") for v in seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        watcher.stop()
    assert any(v and v.endswith(f",{NS},doomed") for v in seen), seen  # the bind took it
    assert node_lock(kc, "lock-fail") is None  # and gave it back when the bind failed


def test_an_expired_lock_is_taken_over(stack: tuple[K8sCluster, ExtenderProcess]) -> None:
    """A lock older than HAMi's 5 minutes, whose owner still exists, is stale: the bind
    overwrites it without waiting."""
    kc, _ = stack
    add_nodes(kc, hami_node("lock-stale", A100, 2))
    create(kc, unscheduled_pod("holder-stale"))
    old = datetime.now(UTC) - timedelta(minutes=6)
    set_lock(kc, "lock-stale", f"{old:%Y-%m-%dT%H:%M:%SZ},{NS},holder-stale")
    create(kc, pinned_pod("fresh", "lock-stale", 25))
    assert wait_bound(kc, "fresh", timeout_s=WAIT_S) == "lock-stale"
    lock = node_lock(kc, "lock-stale")
    assert lock is not None and lock.endswith(f",{NS},fresh"), lock


class NodeLockWatcher:
    """Every value the node's lock takes (None: deleted), from a watch of the node: a lock held
    for milliseconds is seen too."""

    def __init__(self, kc: K8sCluster, node: str, seen: list[str | None]) -> None:
        self.api = make_api_client(kc.api_url)
        self.node, self.seen = node, seen
        self.version = self.api.get(f"/api/v1/nodes/{node}").json()["metadata"]["resourceVersion"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> NodeLockWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()

    def _run(self) -> None:
        params = {"fieldSelector": f"metadata.name={self.node}", "watch": "1"}
        while not self._stop.is_set():
            query = {**params, "resourceVersion": self.version, "timeoutSeconds": "1"}
            with self.api.stream("GET", "/api/v1/nodes", params=query) as r:
                for line in r.iter_lines():
                    if line:
                        obj = json.loads(line)["object"]
                        self.version = obj["metadata"]["resourceVersion"]
                        self.seen.append((obj["metadata"].get("annotations") or {}).get(LOCK))
