"""HAMi's scheduler as a third :class:`k8s_harness.Stack` (issue 24): ``hami-scheduler`` v2.10.0
(github.com/Project-HAMi/HAMi, commit 4707fb02c91c) behind a kube-scheduler of its own, and the
one step of HAMi's device plugin that a cluster without GPUs must stand in for.

The kube-scheduler profile is ``hami-scheduler`` with HAMi's documented extender entry
(``charts/hami/templates/scheduler/configmap.yaml``: filterVerb ``filter``, bindVerb ``bind``,
no prioritizer, nodeCacheCapable, weight 1, httpTimeout 30s, the NVIDIA resources managed and
ignored by kube-scheduler). HAMi's device config is the ``nvidia`` block of its chart's
``device-configmap.yaml`` with the chart's values (split count 10, scaling 1). No admission
webhook runs: pods carry ``schedulerName`` and the webhook's resource defaults
(:func:`webhook_mutated`) themselves, and the policy annotations
(``hami.io/node-scheduler-policy``, ``hami.io/gpu-scheduler-policy``) pick binpack or spread.

HAMi's ``Bind`` takes a node lock (annotation ``hami.io/mutex.lock: <RFC3339>,<ns>,<pod>``) and
marks the pod ``hami.io/bind-phase: allocating``; only the device plugin, once the kubelet asked
it to allocate, sets ``success`` and releases the lock (``pkg/device-plugin/nvidiadevice/
nvinternal/plugin/util.go`` ``updatePodAnnotationsAndReleaseLock``). Until then no other pod can
bind to that node (for ``--node-lock-timeout``, 5 minutes). :class:`DevicePluginStandIn` does that
step and nothing else: for each pod bound with ``allocating``, the ``success`` patch, then the
release of the lock when this pod holds it (HAMi's ``ReleaseNodeLock`` with its owner check).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from k8s_harness import (
    HAMI_SPLIT,
    NS,
    REGISTER,
    PodAsk,
    XpupoolStack,
    cluster,
    hami_pod,
    scheduler_config,
    watch_once,
)
from k8s_harness import node_objects as harness_nodes
from xpupool.k8s.codec import hami

LOCK = "hami.io/mutex.lock"  # pkg/util/nodelock/nodelock.go NodeLockKey
NODE_POLICY = "hami.io/node-scheduler-policy"  # pkg/util/types.go
GPU_POLICY = "hami.io/gpu-scheduler-policy"
SUCCESS = "success"  # util.DeviceBindSuccess
POLICIES = ("binpack", "spread")
HAMI_MANAGED = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
)

# The chart's device-configmap.yaml nvidia block with values.yaml's defaults (v2.10.0).
DEVICE_CONFIG = f"""\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: 0
  memoryFactor: 1
  deviceSplitCount: {HAMI_SPLIT}
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  enableNumaTopology: false
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
"""


class DevicePluginStandIn:
    """Watches the namespace's pods; each pod seen bound (``spec.nodeName``) with
    ``hami.io/bind-phase: allocating`` gets ``success`` and its node's lock released if that
    lock names it, ``workers`` at a time. Counts what it did (``patched``, ``released``) and keeps
    the first error for the caller (``error``), and for each pod it served what HAMi's device
    plugin would have read then (``admissions``, ``"<ns>/<pod>"`` -> ``{"lock": the node's
    hami.io/mutex.lock or "", "at": Unix seconds}``): the interop check of issue 56 replays HAMi's
    own pod lookup with it (``tools/hami-check``)."""

    def __init__(self, api_url: str, token: str, workers: int = 8) -> None:
        self.url, self.token = api_url, token
        self.path = f"/api/v1/namespaces/{NS}/pods"
        self.patched = 0
        self.released = 0
        self.admissions: dict[str, dict[str, Any]] = {}
        self.error: BaseException | None = None
        self._done: set[str] = set()
        self._count = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="hami-dp")
        self._api = cluster.make_api_client(api_url, token)
        self._thread = threading.Thread(target=self._run, name="hami-dp-watch", daemon=True)

    def start(self) -> DevicePluginStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._pool.shutdown(wait=True)
        self._api.close()

    def _run(self) -> None:
        try:
            with cluster.make_api_client(self.url, self.token) as api:
                listed = api.get(self.path)
                listed.raise_for_status()
                for obj in listed.json()["items"]:
                    self._consider(obj)
                version = str(listed.json()["metadata"]["resourceVersion"])
                while not self._stop.is_set():
                    version = self._watch(api, version)
        except BaseException as exc:  # told by the caller through .error
            self.error = exc

    def _watch(self, api: httpx.Client, version: str) -> str:
        def see(event_type: str, obj: dict[str, Any]) -> None:
            if event_type in ("ADDED", "MODIFIED"):
                self._consider(obj)

        return watch_once(api, self.path, version, see)

    def _consider(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (meta.get("annotations") or {}).get(hami.BIND_PHASE)
        if not node or phase != hami.ALLOCATING or meta["name"] in self._done:
            return
        self._done.add(meta["name"])
        self._pool.submit(self._allocated, meta["name"], node)

    def _allocated(self, name: str, node: str) -> None:
        try:
            at = time.time()
            patch = {"metadata": {"annotations": {hami.BIND_PHASE: SUCCESS}}}
            r = self._api.patch(
                f"{self.path}/{name}",
                content=json.dumps(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            r.raise_for_status()
            released, lock = self._release(node, f",{NS},{name}")
            with self._count:
                self.patched += 1
                self.released += released
                self.admissions[f"{NS}/{name}"] = {"lock": lock or "", "at": at}
        except BaseException as exc:
            self.error = self.error or exc

    def _release(self, node: str, owner: str, tries: int = 5) -> tuple[bool, str | None]:
        """Delete the node's lock if it ends with ``owner``; a conflict (the node changed under
        us: resourceVersion in the patch) is tried again, as HAMi's retry does. Returns whether
        it deleted it, and the lock it first read (what the device plugin's lookup saw)."""
        first: str | None = None
        for attempt in range(tries):
            r = self._api.get(f"/api/v1/nodes/{node}")
            r.raise_for_status()
            meta = r.json()["metadata"]
            lock = (meta.get("annotations") or {}).get(LOCK)
            if attempt == 0:
                first = lock
            if lock is None or not lock.endswith(owner):
                return False, first
            patch = {
                "metadata": {
                    "annotations": {LOCK: None},
                    "resourceVersion": meta["resourceVersion"],
                }
            }
            r = self._api.patch(
                f"/api/v1/nodes/{node}",
                content=json.dumps(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if r.status_code == 409:
                continue
            r.raise_for_status()
            return True, first
        raise RuntimeError(f"node {node}: lock release conflicted {tries} times")


def webhook_mutated(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as HAMi's admission webhook leaves it, which every HAMi install runs (the chart's
    default) and this stack does not: ``pkg/device/nvidia/device.go`` ``MutateAdmission``. Of
    what it does, two changes reach the scheduler: ``mutateContainerResource`` adds
    ``nvidia.com/gpu: 1`` (defaultGPUNum) to a container asking memory or cores without a count,
    and ``defaultExclusiveCoreIfNeeded`` adds ``nvidia.com/gpucores: 100`` to a container with a
    count, no cores and the whole card's memory (``gpumem-percentage`` 100, or no memory asked).
    Without it a bare ``nvidia.com/gpu: 1`` would hold the card's memory and none of its
    compute. ``schedulerName`` the pod already names."""
    for ctr in pod["spec"]["containers"]:
        limits = ctr.setdefault("resources", {}).setdefault("limits", {})
        share_keys = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
        asks_share = any(k in limits for k in share_keys)
        if "nvidia.com/gpu" not in limits and asks_share:
            limits["nvidia.com/gpu"] = "1"
        if "nvidia.com/gpu" not in limits or "nvidia.com/gpucores" in limits:
            continue
        if "nvidia.com/gpumem-percentage" in limits:
            exclusive = str(limits["nvidia.com/gpumem-percentage"]).strip() == "100"
        else:
            exclusive = "nvidia.com/gpumem" not in limits
        if exclusive:
            limits["nvidia.com/gpucores"] = "100"
    return pod


def lock_contentions(log: Path) -> int:
    """Binds HAMi refused because the node was locked by another pod's bind: its log lines with
    ``nodelock.go``'s contention errors ("has been locked within", "is locked")."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0
    return sum(
        1
        for line in text.splitlines()
        if "Failed to lock node" in line
        and ("has been locked within" in line or "is locked" in line)
    )


@dataclass
class HamiStack:
    """kube-scheduler v1.36 (profile ``hami-scheduler``) with HAMi's scheduler as its extender,
    pods asking as HAMi users write them with ``policy`` (binpack or spread) for both the node
    and the card policy, and :class:`DevicePluginStandIn` running. Nodes advertise 10 a card."""

    policy: str = "binpack"
    name: str = field(default="", init=False)  # hami_<policy>
    scheduler_name: str = "hami-scheduler"
    gpu_per_card: int = HAMI_SPLIT
    kube_qps: int = 500
    kube_burst: int = 1000
    ready_timeout_s: float = 300.0  # its first registration pass comes on a 15 s ticker
    process: Any = field(default=None, init=False)
    stand_in: DevicePluginStandIn | None = field(default=None, init=False)
    ready_s: float = field(default=0.0, init=False)
    _stats: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy: {self.policy!r} is not one of {POLICIES}")
        self.name = f"hami_{self.policy}"

    def nodes(self, n: int, seed: int) -> list[dict[str, Any]]:
        return harness_nodes(n, seed, self.gpu_per_card)

    def pod(self, ask: PodAsk) -> dict[str, Any]:
        pod = webhook_mutated(hami_pod(ask, self.scheduler_name))
        pod["metadata"]["annotations"] |= {NODE_POLICY: self.policy, GPU_POLICY: self.policy}
        return pod

    def start(self, kc: Any, workdir: Path) -> None:
        config_path = workdir / "hami-device-config.yaml"
        config_path.write_text(DEVICE_CONFIG)
        nodes = kc.api.get("/api/v1/nodes").json()["items"]
        cards = sum(len(json.loads(n["metadata"]["annotations"][REGISTER])) for n in nodes)
        self.process = cluster.HamiSchedulerProcess(
            kc.kubeconfig,
            cluster.free_port(),
            workdir / "hami-scheduler.log",
            config_path,
            kube_qps=self.kube_qps,
            kube_burst=self.kube_burst,
        )
        t0 = time.monotonic()
        self.process.start(cards, timeout_s=self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        self.stand_in = DevicePluginStandIn(kc.api_url, cluster.TOKEN).start()
        ext = cluster.Extender(
            url_prefix=self.process.url,
            filter_verb="filter",
            prioritize_verb=None,
            bind_verb="bind",
            weight=1,
            http_timeout="30s",
            managed_resources=HAMI_MANAGED,
        )
        config = scheduler_config(kc, self.scheduler_name)
        config["extenders"] = [ext.to_config()]
        kc.start_scheduler(config, name="kube-scheduler")

    def stop(self) -> None:
        if self.stand_in is not None:
            self.stand_in.stop()
            self._stats = {
                "device_plugin_success_patches": self.stand_in.patched,
                "device_plugin_lock_releases": self.stand_in.released,
            }
            error, self.stand_in = self.stand_in.error, None
            if error is not None:
                self._stop_process()
                raise RuntimeError("the device-plugin stand-in failed") from error
        self._stop_process()

    def _stop_process(self) -> None:
        if self.process is not None:
            self.process.stop()
            self._stats["hami_bind_lock_contentions"] = lock_contentions(self.process.log)
            self.process = None

    def figures(self) -> dict[str, float]:
        return {"hami_ready_s": round(self.ready_s, 2), **self._stats}


@dataclass
class XpupoolHamiStack(XpupoolStack):
    """xpupool's extender on HAMi's nodes as :class:`HamiStack` runs HAMi's scheduler there:
    taking HAMi's node lock at each bind (``--hami-node-lock auto``: the nodes carry HAMi's
    registration annotation), with the same :class:`DevicePluginStandIn` setting ``success``
    and releasing the lock, so both stacks pay for the lock alike. Its extender call timeout is
    the chart's (and HAMi's) 30 s, and a bind waits up to 25 s for a locked node (the default)."""

    node_lock: str = "auto"
    http_timeout_s: int = 30
    node_lock_wait_s: float = 25.0
    stand_in: DevicePluginStandIn | None = field(default=None, init=False)
    _stats: dict[str, float] = field(default_factory=dict, init=False)

    def start(self, kc: Any, workdir: Path) -> None:
        self.stand_in = DevicePluginStandIn(kc.api_url, cluster.TOKEN).start()
        super().start(kc, workdir)

    def stop(self) -> None:
        stand_in, self.stand_in = self.stand_in, None
        if stand_in is not None:
            stand_in.stop()
            self._stats = {
                "device_plugin_success_patches": stand_in.patched,
                "device_plugin_lock_releases": stand_in.released,
            }
        super().stop()
        if stand_in is not None and stand_in.error is not None:
            raise RuntimeError("the device-plugin stand-in failed") from stand_in.error

    def figures(self) -> dict[str, float]:
        return super().figures() | self._stats
