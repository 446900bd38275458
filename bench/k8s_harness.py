"""What the Kubernetes benchmarks share: a real control plane per scheduler stack, GPU nodes as
HAMi's device plugin registers them, seeded pod streams, bind times from a watch, and the stranded
capacity of the end state replayed into the engine.

One scheduler stack runs at a time on a cluster of its own (fresh etcd, so the reset is total),
and every stack gets the same nodes and the same stream of asks, each rendered the way that stack's
users write pods (:class:`Stack.pod`). ``bench/k8s_e2e.py`` runs kube-scheduler alone and
kube-scheduler with xpupool's extender; the HAMi comparison (issue 24) adds a third
:class:`Stack` (HAMi's scheduler behind its own kube-scheduler) and calls :func:`run_stack` with it.

The control plane is ``tests/e2e/k8s/cluster.py`` (``K8sCluster``, ``ExtenderProcess``): the one
harness the e2e tests use. It lives with the tests, which pytest imports from their folder; this
module loads that same file by path, so there is no second copy to drift.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import httpx
import numpy as np

from xpupool.engine.fragmentation import ShapeTable, TargetWorkload, stranded_capacity
from xpupool.k8s.codec import hami
from xpupool.k8s.codec.pod_request import pod_demand
from xpupool.k8s.codec.resource_names import kind_by_type
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.decoders import decode_node, decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model import Request

ROOT = Path(__file__).resolve().parents[1]
NS = "default"
FIRST_BIND_S = 60.0  # how long a run waits for its first bind before it calls the stack stuck
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
REGISTER = "hami.io/node-nvidia-register"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # gpu-feature-discovery's label, for nodeSelector
HAMI_SPLIT = 10  # HAMi's default deviceSplitCount: tasks that may share one card
_NVIDIA = kind_by_type("NVIDIA")
assert _NVIDIA is not None and _NVIDIA.allocated_key is not None
NVIDIA = _NVIDIA
ALLOCATED = _NVIDIA.allocated_key  # hami.io/vgpu-devices-allocated
# Every NVIDIA resource name of the table, as the chart's managedResources lists them
# (tests/unit/k8s/test_k8s_harness_resources.py): one kube-scheduler checks itself leaves the pod
# Pending, as nvidia.com/priority did before it was here (issue 56).
MANAGED = tuple(
    name
    for name in (
        NVIDIA.count,
        NVIDIA.memory,
        NVIDIA.memory_percent,
        NVIDIA.cores,
        NVIDIA.task_priority,
    )
    if name is not None
)


def _load_cluster() -> ModuleType:
    path = ROOT / "tests" / "e2e" / "k8s" / "cluster.py"
    spec = importlib.util.spec_from_file_location("xpupool_bench_k8s_cluster", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


cluster = _load_cluster()


# -- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One card model: HAMi's type string (what the device plugin registers), its memory, the
    token a user puts in ``nvidia.com/use-gputype``, and gpu-feature-discovery's product label."""

    hami_type: str
    memory_mib: int
    token: str

    @property
    def product(self) -> str:
        return self.hami_type.replace(" ", "-")


MODELS: tuple[GpuModel, ...] = (
    GpuModel("NVIDIA A100-SXM4-80GB", 81920, "A100"),
    GpuModel("NVIDIA H100 80GB HBM3", 81559, "H100"),
    GpuModel("NVIDIA L20", 46068, "L20"),
    GpuModel("NVIDIA Tesla T4", 15360, "T4"),
)
MODEL_WEIGHTS = (0.35, 0.2, 0.25, 0.2)
CARDS_PER_NODE = 8


def node_objects(
    n: int, seed: int, gpu_per_card: int, weights: Sequence[float] = MODEL_WEIGHTS
) -> list[dict[str, Any]]:
    """``n`` kwok Nodes of 8 cards each, models drawn with ``weights`` (one per :data:`MODELS`,
    summing to 1; :data:`MODEL_WEIGHTS` by default) (seeded): HAMi's
    JSON registration annotation (HAMi >= v2.8, ``count`` 10 tasks a card), the product label,
    and ``nvidia.com/gpu`` allocatable ``8 * gpu_per_card`` (HAMi's device plugin advertises 10
    a card, NVIDIA's 1)."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(MODELS), size=n, p=list(weights))
    width = max(5, len(str(n - 1)))
    out = []
    for i, k in enumerate(picks):
        model = MODELS[int(k)]
        name = f"gpu-{i:0{width}d}"
        register = [
            {
                "id": f"GPU-{name}-{j}",
                "index": j,
                "count": HAMI_SPLIT,
                "devmem": model.memory_mib,
                "devcore": 100,
                "type": model.hami_type,
                "numa": j // 4,
                "mode": "hami-core",
                "health": True,
            }
            for j in range(CARDS_PER_NODE)
        ]
        resources = {
            "cpu": "128",
            "memory": "1Ti",
            "pods": "110",
            "nvidia.com/gpu": str(CARDS_PER_NODE * gpu_per_card),
        }
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, PRODUCT_LABEL: model.product},
                    "annotations": {KWOK_ANNOTATION: "fake", REGISTER: json.dumps(register)},
                },
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )
    return out


# -- pods ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What one user wants, before a stack renders it as a pod: ``count`` cards, each a share
    (``memory_pct`` of a card, or ``memory_mib``; ``cores_pct`` of its compute) or whole (both
    None), on a card of ``model`` (a :class:`GpuModel` token, or HAMi's comma-separated
    ``use-gputype`` list) when given. A whole ask is written with 100 % memory and compute unless
    ``count_only`` (the card count alone, as the Alibaba trace's conversion asks)."""

    name: str
    count: int
    memory_pct: int | None = None
    memory_mib: int | None = None
    cores_pct: int | None = None
    model: str | None = None
    count_only: bool = False

    @property
    def whole(self) -> bool:
        return self.memory_pct is None and self.memory_mib is None


def pod_stream(n: int, seed: int) -> list[PodAsk]:
    """``n`` asks (seeded): 40 % a fractional share (10/25/50 % of memory and compute), 10 % an
    amount of memory (4, 8 or 12 GiB: every model holds it), 30 % one whole card, 20 % 2, 4 or 8
    whole cards; a third of them typed (``use-gputype``, one of the four models)."""
    rng = np.random.default_rng(seed + 1)
    out = []
    for i in range(n):
        roll = float(rng.random())
        model = MODELS[int(rng.integers(len(MODELS)))].token if rng.random() < 1 / 3 else None
        name = f"p-{i:05d}"
        if roll < 0.4:
            pct = (10, 25, 50)[int(rng.integers(3))]
            out.append(PodAsk(name, 1, memory_pct=pct, cores_pct=pct, model=model))
        elif roll < 0.5:
            mib = (4096, 8192, 12288)[int(rng.integers(3))]
            out.append(PodAsk(name, 1, memory_mib=mib, cores_pct=20, model=model))
        elif roll < 0.8:
            out.append(PodAsk(name, 1, model=model))
        else:
            out.append(PodAsk(name, (2, 4, 8)[int(rng.integers(3))], model=model))
    return out


def _pod(
    name: str,
    scheduler_name: str,
    limits: dict[str, str],
    annotations: dict[str, str],
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/bench:0",
                "resources": {
                    "requests": {"cpu": "1", "memory": "4Gi"},
                    "limits": {"cpu": "1", "memory": "4Gi", **limits},
                },
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": spec,
    }


def hami_pod(ask: PodAsk, scheduler_name: str) -> dict[str, Any]:
    """The pod as a HAMi user writes it: ``nvidia.com/gpu`` cards, ``gpumem-percentage`` or
    ``gpumem`` (MiB) and ``gpucores`` per card, ``nvidia.com/use-gputype``; a whole card asks
    100 % of memory and compute (HAMi shares the compute of a card asked without gpucores), or
    the count alone when the ask is ``count_only``."""
    limits = {"nvidia.com/gpu": str(ask.count)}
    if ask.whole and not ask.count_only:
        limits |= {"nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"}
    else:
        if ask.memory_pct is not None:
            limits["nvidia.com/gpumem-percentage"] = str(ask.memory_pct)
        if ask.memory_mib is not None:
            limits["nvidia.com/gpumem"] = str(ask.memory_mib)
        if ask.cores_pct is not None:
            limits["nvidia.com/gpucores"] = str(ask.cores_pct)
    annotations = {"nvidia.com/use-gputype": ask.model} if ask.model else {}
    return _pod(ask.name, scheduler_name, limits, annotations)


def whole_gpu_pod(ask: PodAsk, scheduler_name: str) -> dict[str, Any]:
    """The pod as NVIDIA's device plugin alone lets a user write it: whole cards as an extended
    resource (a share becomes one card), the model as a nodeSelector on gpu-feature-discovery's
    product label."""
    selector = None
    if ask.model:
        model = next(m for m in MODELS if m.token == ask.model)
        selector = {PRODUCT_LABEL: model.product}
    return _pod(ask.name, scheduler_name, {"nvidia.com/gpu": str(ask.count)}, {}, selector)


def ask_requests(asks: Iterable[PodAsk]) -> dict[str, Request]:
    """Pod name -> the engine request of its ask as a HAMi pod says it (what the user wants,
    whatever a stack grants): the target workload of the stranded-capacity measure."""
    return {a.name: pod_demand(hami_pod(a, "x")).demands[0].request for a in asks}


# -- scheduler stacks ------------------------------------------------------------------------


class Stack(Protocol):
    """One scheduler stack: how its nodes advertise cards, how its users write pods, and how it
    starts on (and stops from) a running control plane that has its nodes already."""

    name: str
    scheduler_name: str

    def nodes(self, n: int, seed: int) -> list[dict[str, Any]]:
        """The stack's ``n`` Nodes (the same cards for every stack; what they advertise and
        carry may differ)."""
        ...

    def pod(self, ask: PodAsk) -> dict[str, Any]: ...
    def start(self, kc: Any, workdir: Path) -> None: ...
    def stop(self) -> None: ...
    def figures(self) -> dict[str, float]:
        """Figures of the stack itself (its start-up), merged into the run's."""
        ...


def scheduler_config(kc: Any, scheduler_name: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration every stack's kube-scheduler runs with (client QPS as
    K8sCluster's own, every node scored)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kc.kubeconfig), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": scheduler_name}],
    }


@dataclass
class KubeSchedulerAlone:
    """kube-scheduler v1.36 with its default plugins and no extender: whole cards only, as the
    extended resource ``nvidia.com/gpu`` (1 a card)."""

    name: str = "kube_scheduler"
    scheduler_name: str = "bench-kube"
    gpu_per_card: int = 1

    def nodes(self, n: int, seed: int) -> list[dict[str, Any]]:
        return node_objects(n, seed, self.gpu_per_card)

    def pod(self, ask: PodAsk) -> dict[str, Any]:
        return whole_gpu_pod(ask, self.scheduler_name)

    def start(self, kc: Any, workdir: Path) -> None:
        kc.start_scheduler(scheduler_config(kc, self.scheduler_name), name="kube-scheduler")

    def stop(self) -> None:
        """kube-scheduler stops with the cluster."""

    def figures(self) -> dict[str, float]:
        return {}


@dataclass
class XpupoolStack:
    """kube-scheduler v1.36 with ``xpupool k8s extender`` (a real process, its default profile
    unless ``policy``) as its extender: filter, prioritize, bind and preempt, the HAMi resources
    managed and ignored by kube-scheduler, as the Helm chart configures it. ``node_lock`` is its
    ``--hami-node-lock``: off here, where nothing releases HAMi's node lock (no device plugin);
    ``bench/hami_stack.py`` ``XpupoolHamiStack`` runs a stand-in of HAMi's device plugin and
    turns it on."""

    name: str = "xpupool"
    scheduler_name: str = "bench-xpupool"
    gpu_per_card: int = HAMI_SPLIT
    policy: str | None = None
    node_lock: str = "off"
    http_timeout_s: int = 10
    node_lock_wait_s: float = 8.0  # under http_timeout_s, leaving the Binding its time
    extender: Any = field(default=None, init=False)
    warmup_s: float = field(default=0.0, init=False)

    def nodes(self, n: int, seed: int) -> list[dict[str, Any]]:
        return node_objects(n, seed, self.gpu_per_card)

    def pod(self, ask: PodAsk) -> dict[str, Any]:
        return hami_pod(ask, self.scheduler_name)

    def start(self, kc: Any, workdir: Path) -> None:
        port = cluster.free_port()
        log = workdir / "extender.log"
        self.extender = cluster.ExtenderProcess(
            kc.kubeconfig,
            port,
            log,
            ("--hami-node-lock-wait", str(self.node_lock_wait_s)),
            policy=self.policy,
            node_lock=self.node_lock,
        )
        self.extender.start()
        ext = cluster.Extender(
            url_prefix=self.extender.url,
            preempt_verb="preempt",
            weight=10,
            http_timeout=f"{self.http_timeout_s}s",
            managed_resources=MANAGED,
        )
        self.warmup_s = warm_extender(self.extender.url, kc.api, self.scheduler_name)
        config = scheduler_config(kc, self.scheduler_name)
        config["extenders"] = [ext.to_config()]
        kc.start_scheduler(config, name="kube-scheduler")

    def stop(self) -> None:
        if self.extender is not None:
            self.extender.stop()
            self.extender = None

    def figures(self) -> dict[str, float]:
        return {"extender_warmup_s": round(self.warmup_s, 2)}


WARM_UP = PodAsk("warm-up", 1, memory_pct=10, cores_pct=10)


def warm_extender(url: str, api: httpx.Client, scheduler_name: str, ask: PodAsk = WARM_UP) -> float:
    """One filter and one prioritize over every node for a pod (of ``ask``) that is never
    created, before any timing: the first call of a profile builds what it learns once
    (compiled kernels, the workload model), seconds that a long-running extender pays once.
    The filter holds the share it finds for 30 s (what the plane in front of a site does not
    see: ``bench/k8s_plane.py`` warms with an ask no node holds). Returns those seconds."""
    names = [n["metadata"]["name"] for n in list_all(api, "/api/v1/nodes")]
    pod = hami_pod(ask, scheduler_name)
    pod["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
    body = {"Pod": pod, "Nodes": None, "NodeNames": names}
    t0 = time.monotonic()
    with httpx.Client(base_url=url, timeout=300) as client:
        for verb in ("filter", "prioritize"):
            r = client.post(f"/{verb}", json=body)
            r.raise_for_status()
            if isinstance(r.json(), dict) and r.json().get("Error"):
                raise RuntimeError(f"warm-up {verb}: {r.json()['Error']}")
    return time.monotonic() - t0


# -- the API ---------------------------------------------------------------------------------


def create_all(
    api: httpx.Client, path: str, objs: Sequence[dict[str, Any]], concurrency: int = 16
) -> dict[str, float]:
    """POST every object (``concurrency`` at a time, as fast as the apiserver takes them);
    returns name -> ``time.monotonic()`` when its POST was sent. Raises on any refusal."""
    sent: dict[str, float] = {}

    def one(obj: dict[str, Any]) -> None:
        body = json.dumps(obj).encode()
        name = obj["metadata"]["name"]
        sent[name] = time.monotonic()
        r = api.post(path, content=body, headers={"Content-Type": "application/json"})
        if r.status_code != 201:
            raise RuntimeError(f"POST {path} {name}: HTTP {r.status_code}: {r.text[-500:]}")

    with ThreadPoolExecutor(concurrency) as pool:
        for _ in pool.map(one, objs):
            pass
    return sent


def list_all(api: httpx.Client, path: str) -> list[dict[str, Any]]:
    """Every object at ``path``, 500 a page."""
    items: list[dict[str, Any]] = []
    params: dict[str, str] = {"limit": "500"}
    while True:
        r = api.get(path, params=params, timeout=60)
        r.raise_for_status()
        body = r.json()
        items += body["items"]
        token = body["metadata"].get("continue")
        if not token:
            return items
        params = {"limit": "500", "continue": token}


def _unschedulable(pod: dict[str, Any]) -> bool:
    """Has kube-scheduler found no node for the pod (``PodScheduled`` False, ``Unschedulable``)?"""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return bool(cond.get("status") == "False")
    return False


class BindWatcher:
    """A watch of the namespace's pods in a thread: the ``time.monotonic()`` at which each pod
    was first seen at all (``seen``: created, for pods that someone else creates) and with
    ``spec.nodeName`` (``bound``: its Binding landed), and the first pod seen marked
    unschedulable, with when. Reconnects from the last
    resourceVersion every few seconds, so :meth:`stop` returns promptly."""

    def __init__(self, api_url: str, token: str, namespace: str = NS) -> None:
        self.url = api_url
        self.token = token
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.seen: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.first_unschedulable: tuple[str, float] | None = None
        self.error: BaseException | None = None
        self._version = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)

    def start(self) -> BindWatcher:
        """Lists once (here, so no pod created after this returns can be missed), then
        watches from that list's resourceVersion in the thread."""
        with cluster.make_api_client(self.url, self.token) as api:
            listed = api.get(self.path)
            listed.raise_for_status()
        now = time.monotonic()
        for obj in listed.json()["items"]:
            self.seen.setdefault(obj["metadata"]["name"], now)
            if (obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(obj["metadata"]["name"], now)
        self._version = str(listed.json()["metadata"]["resourceVersion"])
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            with cluster.make_api_client(self.url, self.token) as api:
                version = self._version
                while not self._stop.is_set():
                    version = self._watch(api, version)
        except BaseException as exc:  # told by the caller through .error
            self.error = exc

    def _watch(self, api: httpx.Client, version: str) -> str:
        return watch_once(api, self.path, version, self._see)

    def _see(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"].get("name")
        if name and name not in self.seen:
            self.seen[name] = time.monotonic()
        if name and name not in self.bound and (obj.get("spec") or {}).get("nodeName"):
            self.bound[name] = time.monotonic()
        elif self.first_unschedulable is None and name and _unschedulable(obj):
            self.first_unschedulable = (name, time.monotonic())


def watch_once(
    api: httpx.Client, path: str, version: str, see: Callable[[str, dict[str, Any]], None]
) -> str:
    """One watch of ``path`` from ``version`` (ended by the apiserver after 3 s): ``see(type,
    object)`` for every event, bookmarks included; the resourceVersion to go on from."""
    params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3"}
    params["allowWatchBookmarks"] = "true"
    with api.stream("GET", path, params=params, timeout=30) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch error: {event['object']}")
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            see(event["type"], obj)
    return version


# -- one run ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One stack's run: what was sent when, when each pod was bound, the end state."""

    stack: str
    sent: dict[str, float]
    bound_at: dict[str, float]
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    create_s: float
    nodes_create_s: float
    stack_figures: dict[str, float]
    first_unschedulable: tuple[str, float] | None = None


def run_stack(
    stack: Stack,
    n_nodes: int,
    asks: Sequence[PodAsk],
    workdir: Path,
    *,
    seed: int = 1,
    settle_s: float = 10.0,
    first_bind_s: float = FIRST_BIND_S,
    timeout_s: float = 900.0,
    concurrency: int = 16,
    log: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """A fresh control plane (etcd, kube-apiserver, kwok; no scheduler of its own), the stack's
    nodes, the stack started, then every ask created as that stack's pod as fast as the
    apiserver takes them (``concurrency`` POSTs in flight); waits until every pod is bound, or
    no pod has been bound for ``settle_s`` once all are created (``first_bind_s`` before the
    first bind: a scheduler that answers ready may still be filling its caches, and kwok still
    marking the nodes ready), or ``timeout_s``; returns the end state."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "cluster", ignore_errors=True)  # a kept workdir: etcd starts empty
    with cluster.K8sCluster(workdir / "cluster", scheduler=False, kwok=True) as kc:
        nodes = stack.nodes(n_nodes, seed)
        t0 = time.monotonic()
        create_all(kc.api, "/api/v1/nodes", nodes)
        nodes_create_s = time.monotonic() - t0
        log(f"{stack.name}: {n_nodes} nodes in {nodes_create_s:.1f} s")
        watcher: BindWatcher | None = None
        try:
            stack.start(kc, workdir)
            watcher = BindWatcher(kc.api_url, cluster.TOKEN).start()
            pods = [stack.pod(a) for a in asks]
            t0 = time.monotonic()
            sent = create_all(kc.api, f"/api/v1/namespaces/{NS}/pods", pods, concurrency)
            create_s = time.monotonic() - t0
            log(f"{stack.name}: {len(pods)} pods created in {create_s:.1f} s")
            deadline = t0 + timeout_s
            last, last_change = -1, time.monotonic()
            while time.monotonic() < deadline and watcher.error is None:
                done = len(watcher.bound)
                if done >= len(pods):
                    break
                if done != last:
                    last, last_change = done, time.monotonic()
                elif time.monotonic() - last_change > (settle_s if done else first_bind_s):
                    break
                time.sleep(0.2)
            watcher.stop()
            if watcher.error is not None:
                raise RuntimeError(f"{stack.name}: the bind watch failed") from watcher.error
            log(f"{stack.name}: {len(watcher.bound)} bound")
            end_nodes = list_all(kc.api, "/api/v1/nodes")
            end_pods = list_all(kc.api, f"/api/v1/namespaces/{NS}/pods")
            end = {"nodes": end_nodes, "pods": end_pods}
            (workdir / "end_state.json").write_text(json.dumps(end))
        finally:
            if watcher is not None:
                watcher.stop()
            stack.stop()
    return RunResult(
        stack.name,
        sent,
        watcher.bound,
        end_nodes,
        end_pods,
        create_s,
        nodes_create_s,
        stack.figures(),
        watcher.first_unschedulable,
    )


# -- figures ---------------------------------------------------------------------------------


def pending_reasons(pods: Iterable[dict[str, Any]], top: int = 5) -> dict[str, int]:
    """The most common messages of unbound pods' ``PodScheduled`` condition (kube-scheduler's
    FitError text, the node count at the front cut off), with counts."""
    counts: Counter[str] = Counter()
    for p in pods:
        if (p.get("spec") or {}).get("nodeName"):
            continue
        message = "no scheduling attempt recorded"
        for cond in (p.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = str(cond.get("message") or cond.get("reason") or "")
        counts[message.split("nodes are available: ", 1)[-1][:300]] += 1
    return dict(counts.most_common(top))


def whole_card_charges(
    nodes: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The bound pods, those without a device annotation given HAMi's ``allocated`` annotation
    for the whole cards NVIDIA's device plugin would hand them (the node's first free cards, one
    per ``nvidia.com/gpu``), so a stack that writes no annotation replays like one that does.
    Raises if a node is asked for more cards than it has."""
    cards = {}
    for obj in nodes:
        node = decode_node(obj)
        if node is not None:
            cards[node.name] = [(d.uuid, d.memory_mib) for d in node.devices]
    taken: dict[str, set[str]] = {}
    for p in pods:  # annotated charges first: they name their cards
        devices = decode_pod_devices(p) if p["spec"].get("nodeName") else None
        if devices is not None:
            held = taken.setdefault(devices.node, set())
            held.update(s.uuid for c in devices.containers for s in c)
    out = []
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node:
            continue
        if decode_pod_devices(p) is not None:
            out.append(p)
            continue
        want = sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for c in p["spec"]["containers"]
        )
        held = taken.setdefault(node, set())
        free = [(u, m) for u, m in cards.get(node, []) if u not in held]
        if want > len(free):
            raise RuntimeError(f"{p['metadata']['name']}: {want} cards on {node}, {len(free)} free")
        grant = free[:want]
        held.update(u for u, _ in grant)
        text = hami.encode_pod_devices(
            [[hami.ContainerDevice(u, NVIDIA.hami_type, m, 100) for u, m in grant]]
        )
        annotations = {**(p["metadata"].get("annotations") or {})}
        annotations[ALLOCATED] = text
        out.append({**p, "metadata": {**p["metadata"], "annotations": annotations}})
    return out


def capacity_figures(
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    workload: Mapping[str, Request],
) -> dict[str, float]:
    """The end state replayed into the engine through the extender's own cluster view (the same
    node and pod decoders), then the engine's stranded-capacity function for the target workload
    of ``workload`` (pod name -> request; FGD's most popular shapes): ``stranded_gpu_memory_pct``
    of all card memory idle where no shape of it fits; ``idle_gpu_memory_pct``; the same two for
    compute (``stranded_gpu_cores_pct``, ``idle_gpu_cores_pct``: thousandths of a card);
    ``granted_unasked_gpu_memory_pct``, card memory granted beyond what the pods asked (a whole
    card for a share). Raises if a bound pod's charge does not fit its cards (a double
    allocation)."""
    view = ClusterView(decode_node, decode_pod_devices, profile="binpack")
    for obj in nodes:
        meta = obj["metadata"]
        view.on_node(Event(EventType.ADDED, meta["name"], meta["uid"], view.node_record(obj)))
    charged = whole_card_charges(nodes, pods)
    for obj in charged:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        view.on_pod(Event(EventType.ADDED, key, meta["uid"], view.pod_record(obj)))
    with view.engine_locked() as engine:
        state = engine.state
        held = view.charges()
        wanted = sum(len(allocs) for allocs in held.values())
        if len(held) != len(charged) or len(state.live) != wanted:
            raise RuntimeError(
                f"{len(charged)} bound pods with cards, {len(held)} read, {len(state.live)} of "
                f"their {wanted} allocations fit their cards: a card is over-committed"
            )
        table = ShapeTable(state, engine.pipeline, TargetWorkload.from_requests(workload.values()))
        stranded = stranded_capacity(state, table)
        total = float(state.dev_mem_total.sum())
        idle = float(state.dev_mem_free.sum())
        cores_total = float(state.dev_core_commit.sum())
        cores_idle = float(state.dev_core_free.sum())
    card_mib = {}
    for obj in nodes:
        node = decode_node(obj)
        card_mib.update({d.uuid: d.memory_mib for d in node.devices} if node else {})
    granted = asked = 0.0
    for obj in charged:
        devices = decode_pod_devices(obj)
        assert devices is not None
        shares = [s for c in devices.charged() for s in c]
        granted += sum(s.memory_mib for s in shares)
        req = workload.get(obj["metadata"]["name"])
        if req is not None:
            asked += _asked_mib(req, [card_mib[s.uuid] for s in shares])
    return {
        "stranded_gpu_memory_pct": round(100 * stranded.total_memory_mib / total, 2),
        "idle_gpu_memory_pct": round(100 * idle / total, 2),
        "stranded_gpu_cores_pct": round(100 * stranded.total_core_milli / cores_total, 2),
        "idle_gpu_cores_pct": round(100 * cores_idle / cores_total, 2),
        "granted_unasked_gpu_memory_pct": round(100 * (granted - asked) / total, 2) or 0.0,
    }


def _asked_mib(req: Request, card_mib: Sequence[int]) -> float:
    """Memory ``req`` asked of the cards it holds (``card_mib``: each card's memory): MiB, or a
    share of the card, or the whole card."""
    d = req.devices
    asked = 0.0
    for mib in card_mib:
        if d.memory_mib:
            asked += min(d.memory_mib, mib)
        elif d.memory_permille:
            asked += mib * d.memory_permille / 1000
        else:
            asked += mib
    return asked


def bind_figures(result: RunResult) -> dict[str, Any]:
    """Pods bound per second (bound pods over first send to last bind), creation -> bind p50/p99
    (send of the POST to the watch seeing ``spec.nodeName``; ``bind_seen`` of them, which is
    ``bound`` unless the watch missed one), pending pods and why, and the stack's own figures."""
    lat = [result.bound_at[n] - result.sent[n] for n in result.bound_at if n in result.sent]
    bound = sum(1 for p in result.pods if p["spec"].get("nodeName"))
    start = min(result.sent.values())
    span = max(result.bound_at.values(), default=start) - start
    return {
        "pods": len(result.sent),
        "bound": bound,
        "bind_seen": len(result.bound_at),
        "pending": len(result.pods) - bound,
        "pods_per_s": round(bound / span, 1) if span > 0 else 0.0,
        "bind_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 1) if lat else None,
        "bind_p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 1) if lat else None,
        "create_s": round(result.create_s, 2),
        "nodes_create_s": round(result.nodes_create_s, 2),
        "pending_reasons": pending_reasons(result.pods),
        **result.stack_figures,
    }


def first_unschedulable_figures(
    result: RunResult, workload: Mapping[str, Request]
) -> dict[str, Any] | None:
    """When a pod was found unschedulable (issue 24's moment), that pod, how many were bound
    when the watch first saw it, and the capacity figures of those pods; else None."""
    first = result.first_unschedulable
    if first is None:
        return None
    # The pods bound by then hold what they held at the end: a bind never moves.
    then = [p for p in result.pods if result.bound_at.get(p["metadata"]["name"], 1e300) <= first[1]]
    at_fail = capacity_figures(result.nodes, then, workload)
    return {
        "pod": first[0],
        "bound_before": len(then),
        **{k: v for k, v in at_fail.items() if k != "granted_unasked_gpu_memory_pct"},
    }


def figures(result: RunResult, workload: Mapping[str, Request]) -> dict[str, Any]:
    """The JSON figures of one run: :func:`bind_figures`, the capacity figures of the end state
    and ``first_unschedulable`` (:func:`first_unschedulable_figures`)."""
    out = bind_figures(result)
    out.update(capacity_figures(result.nodes, result.pods, workload))
    out["first_unschedulable"] = first_unschedulable_figures(result, workload)
    return out
