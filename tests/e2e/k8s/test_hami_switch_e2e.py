"""Switching one cluster from xpupool to HAMi's scheduler and back (issue 56), audited by HAMi's own
code: xpupool's extender places a mix of pods (fractional, memory, whole, multi-card, init
containers, two containers), stops; HAMi's scheduler (v2.10.0) places more, stops; xpupool's
extender starts again and places more. Between the phases nothing on the nodes changes, as the docs
promise. After each phase ``xpupool-hami-check`` (``tools/hami-check/main.go``, compiled inside
HAMi's module by ``tools/k8s/build.sh --hami-check``) reads every Node and Pod and answers with
HAMi's functions: the decode of every device annotation, every card charged by HAMi's rules
(init containers as ``CollapseInitContainerUsage``, app containers only once they have all
succeeded) against its registration, and each bound pod's admission replayed through the device
plugin's ``GetPendingPod`` / ``GetNextDeviceRequest`` / ``PodAllocationTrySuccess`` with the node
lock the device-plugin stand-in saw at that moment.

Both schedulers take HAMi's node lock here (xpupool with ``--hami-node-lock auto``: the nodes carry
HAMi's registration) and the stand-in of HAMi's device plugin (``bench/hami_stack.py``) sets
``success`` and releases it. Marked ``hami``: deselected by default, run by ``make test-hami``. A
missing ``hami-scheduler`` or ``xpupool-hami-check`` FAILS the test, never skips it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cluster import (
    BINARIES,
    HAMI_BINARY,
    HAMI_CHECK_BINARY,
    TOKEN,
    Extender,
    ExtenderProcess,
    HamiSchedulerProcess,
    K8sCluster,
    free_port,
    require_binaries,
)

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))

from hami_stack import (  # noqa: E402
    DEVICE_CONFIG,
    GPU_POLICY,
    HAMI_MANAGED,
    NODE_POLICY,
    DevicePluginStandIn,
    webhook_mutated,
)
from k8s_harness import (  # noqa: E402
    HAMI_SPLIT,
    MANAGED,
    NS,
    REGISTER,
    create_all,
    list_all,
    node_objects,
    scheduler_config,
)

pytestmark = [pytest.mark.hami, pytest.mark.k8s]

CHECKER = HAMI_CHECK_BINARY  # tools/k8s/build.sh --hami-check
XPUPOOL = "xpupool-scheduler"
HAMI = "hami-scheduler"
N_NODES = 4  # 32 cards: the three phases ask for more whole cards than that, so cards fill up
SETTLE_S = 20.0  # no bind for this long after the last one: the phase is over
FIRST_BIND_S = 90.0  # a kube-scheduler just started may still be syncing and kwok readying nodes


def card_limits(count: int, mem_pct: int | None, cores: int | None, mib: int | None = None) -> dict:
    """HAMi's resources of one container: ``count`` cards, each ``mem_pct`` % (or ``mib`` MiB)
    of memory and ``cores`` % of compute; a whole card when neither memory is given."""
    limits = {"nvidia.com/gpu": str(count)}
    if mem_pct is not None:
        limits["nvidia.com/gpumem-percentage"] = str(mem_pct)
    if mib is not None:
        limits["nvidia.com/gpumem"] = str(mib)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return limits


def container(name: str, limits: dict[str, str]) -> dict[str, Any]:
    resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m", **limits}}
    return {"name": name, "image": "registry.invalid/none:0", "resources": resources}


def mix(prefix: str, scheduler: str) -> list[dict[str, Any]]:
    """One phase's pods, as a HAMi user writes them (and HAMi's webhook leaves them): five
    fractional shares, two memory amounts, four whole cards, two pods of two whole cards, one of
    two 30 % cards, three with an init container (one card, init 60 % then app 40 %; init a
    whole card then app 20 %; init 50 % then two app containers of 25 %), one of two app
    containers on cards of their own."""
    shapes: list[tuple[str, list[dict[str, str]], list[dict[str, str]]]] = []
    for i, pct in enumerate((10, 25, 50, 25, 10)):
        shapes.append((f"frac{i}", [], [card_limits(1, pct, pct)]))
    for i, mib in enumerate((4096, 8192)):
        shapes.append((f"mib{i}", [], [card_limits(1, None, 20, mib)]))
    for i in range(4):
        shapes.append((f"whole{i}", [], [card_limits(1, 100, 100)]))
    for i in range(2):
        shapes.append((f"multi{i}", [], [card_limits(2, 100, 100)]))
    shapes.append(("multifrac", [], [card_limits(2, 30, 30)]))
    shapes.append(("init0", [card_limits(1, 60, 60)], [card_limits(1, 40, 40)]))
    shapes.append(("init1", [card_limits(1, 100, 100)], [card_limits(1, 20, 20)]))
    shapes.append(
        ("init2", [card_limits(1, 50, 50)], [card_limits(1, 25, 25), card_limits(1, 25, 25)])
    )
    shapes.append(("twoapps", [], [card_limits(1, 30, 30), card_limits(1, 30, 30)]))
    pods = []
    for name, inits, apps in shapes:
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "containers": [container(f"app{i}", lim) for i, lim in enumerate(apps)],
        }
        if inits:
            spec["initContainers"] = [container(f"init{i}", lim) for i, lim in enumerate(inits)]
        annotations = {NODE_POLICY: "binpack", GPU_POLICY: "binpack"} if scheduler == HAMI else {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{prefix}-{name}", "namespace": NS, "annotations": annotations},
            "spec": spec,
        }
        pods.append(webhook_mutated(pod))
    return pods


def wait_settled(kc: K8sCluster, stand_in: DevicePluginStandIn, names: set[str]) -> int:
    """Until every pod of ``names`` is bound, or none was bound for :data:`SETTLE_S` (for
    :data:`FIRST_BIND_S` before the first); then until
    the stand-in has served every bound pod (no lock left held). Returns how many are bound."""
    last, last_change = -1, time.monotonic()
    while True:
        pods = list_all(kc.api, f"/api/v1/namespaces/{NS}/pods")
        done = sum(1 for p in pods if p["metadata"]["name"] in names and p["spec"].get("nodeName"))
        if done >= len(names):
            break
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > (SETTLE_S if done else FIRST_BIND_S):
            break
        assert stand_in.error is None, stand_in.error
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = list_all(kc.api, f"/api/v1/namespaces/{NS}/pods")
        held = [p for p in pods if p["spec"].get("nodeName") and not_served(p)]
        if not held:
            return done
        time.sleep(0.5)
    raise AssertionError(f"the device plugin stand-in never served {held}")


def not_served(pod: dict[str, Any]) -> bool:
    return bool(
        (pod["metadata"].get("annotations") or {}).get("hami.io/bind-phase") == "allocating"
    )


@contextmanager
def xpupool_phase(kc: K8sCluster, workdir: Path, phase: str) -> Iterator[None]:
    """xpupool's extender (``--hami-node-lock auto``) behind a kube-scheduler of its own, as the
    Helm chart configures it; both stopped on leaving."""
    port = free_port()
    proc = ExtenderProcess(
        kc.kubeconfig,
        port,
        workdir / f"extender-{phase}.log",
        ("--hami-node-lock-wait", "25"),
        node_lock="auto",
    ).start()
    ext = Extender(
        url_prefix=proc.url,
        preempt_verb="preempt",
        weight=10,
        http_timeout="30s",
        managed_resources=MANAGED,
    )
    config = scheduler_config(kc, XPUPOOL)
    config["extenders"] = [ext.to_config()]
    try:
        sched = kc.start_scheduler(config, name=f"kube-scheduler-{phase}")
        try:
            yield
        finally:
            sched.stop()
    finally:
        proc.stop()


@contextmanager
def hami_phase(kc: K8sCluster, workdir: Path, phase: str, cards: int) -> Iterator[None]:
    """HAMi's scheduler (the chart's nvidia device config) behind a kube-scheduler of its own
    with HAMi's documented extender entry, as ``bench/hami_stack.py`` runs it."""
    config_path = workdir / "hami-device-config.yaml"
    config_path.write_text(DEVICE_CONFIG)
    proc = HamiSchedulerProcess(
        kc.kubeconfig, free_port(), workdir / f"hami-scheduler-{phase}.log", config_path
    )
    proc.start(cards, timeout_s=300)
    ext = Extender(
        url_prefix=proc.url,
        filter_verb="filter",
        prioritize_verb=None,
        bind_verb="bind",
        weight=1,
        http_timeout="30s",
        managed_resources=HAMI_MANAGED,
    )
    config = scheduler_config(kc, HAMI)
    config["extenders"] = [ext.to_config()]
    try:
        sched = kc.start_scheduler(config, name=f"kube-scheduler-{phase}")
        try:
            yield
        finally:
            sched.stop()
    finally:
        proc.stop()


def hami_check(
    checker: Path, kc: K8sCluster, stand_in: DevicePluginStandIn, path: Path
) -> dict[str, Any]:
    """Every Node and Pod, with what the stand-in saw at each admission, through the checker;
    its answer, and under ``asked`` what it decoded that differs from what the pods asked."""
    snapshot = {
        "nodes": list_all(kc.api, "/api/v1/nodes"),
        "pods": list_all(kc.api, f"/api/v1/namespaces/{NS}/pods"),
        "admissions": dict(stand_in.admissions),
    }
    path.write_text(json.dumps(snapshot))
    out = subprocess.run(
        [str(checker), "-in", str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"{checker} failed:\n{out.stderr[-4000:]}"
    path.with_suffix(".check.json").write_text(out.stdout)  # kept for a reader
    got = dict(json.loads(out.stdout))
    got["asked"] = asked_as_decoded(snapshot, got)
    return got


def asked_as_decoded(snapshot: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What HAMi decoded against what each container asked: per card, ``gpucores`` as the
    cores, and ``gpumem`` MiB, or ``gpumem-percentage`` of the card's registered memory rounded
    down as HAMi computes it, as the memory. Returns the differences."""
    devmem = {
        card["id"]: card["devmem"]
        for n in snapshot["nodes"]
        for card in json.loads(n["metadata"]["annotations"].get(REGISTER, "[]"))
    }
    specs = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in snapshot["pods"]}
    wrong = []
    for decoded in got["pods"]:
        spec = specs[decoded["pod"]]["spec"]
        ctrs = [*spec.get("initContainers", []), *spec["containers"]]
        for ctr, cards in zip(ctrs, decoded["containers"], strict=False):
            limits = ctr["resources"]["limits"]
            for card in cards:
                want_cores = int(limits.get("nvidia.com/gpucores", 0))
                if "nvidia.com/gpumem" in limits:
                    want_mem = int(limits["nvidia.com/gpumem"])
                else:
                    pct = int(limits.get("nvidia.com/gpumem-percentage", 100))
                    want_mem = devmem[card["uuid"]] * pct // 100
                if (card["mem"], card["cores"]) != (want_mem, want_cores):
                    wrong.append(
                        f"{decoded['pod']} {ctr['name']}: {card} asks {want_mem}/{want_cores}"
                    )
    return wrong


def assert_clean(phase: str, got: dict[str, Any]) -> None:
    """HAMi decodes every annotation, charges no card beyond its registration, and its device
    plugin serves every bound pod its own cards."""
    s = got["summary"]
    bad_pods = [p for p in got["pods"] if p.get("error") or p.get("shape_mismatch")]
    assert s["decode_errors"] == 0 and s["shape_mismatches"] == 0, (phase, bad_pods)
    assert not got["asked"], (phase, got["asked"])
    assert s["node_decode_errors"] == 0, (phase, got["node_errors"])
    over = [c for c in got["cards"] if c.get("over")]
    assert s["over_capacity_cards"] == 0, (phase, over)
    assert s["unknown_cards"] == 0, (phase, got["unknown_cards"])
    failed = [a for a in got["admissions"] if a.get("error") or a["served"] != a["pod"]]
    assert s["admission_failures"] == 0 and not failed, (phase, failed)
    assert s["served_own_pod"] == s["admissions"], phase
    assert s["locks_left"] == 0, (phase, got["admissions"])


def test_switch_xpupool_hami_xpupool_audited_by_hamis_own_code(tmp_path: Path) -> None:
    bins = require_binaries((*BINARIES, "kwok", HAMI_BINARY, CHECKER))
    with K8sCluster(tmp_path / "cluster", scheduler=False, kwok=True) as kc:
        nodes = node_objects(N_NODES, 7, HAMI_SPLIT)
        create_all(kc.api, "/api/v1/nodes", nodes)
        cards = sum(len(json.loads(n["metadata"]["annotations"][REGISTER])) for n in nodes)
        stand_in = DevicePluginStandIn(kc.api_url, TOKEN).start()
        results: dict[str, dict[str, Any]] = {}
        phases: list[tuple[str, str, Callable[[], Any]]] = [
            ("1-xpupool", XPUPOOL, lambda: xpupool_phase(kc, tmp_path, "1-xpupool")),
            ("2-hami", HAMI, lambda: hami_phase(kc, tmp_path, "2-hami", cards)),
            ("3-xpupool", XPUPOOL, lambda: xpupool_phase(kc, tmp_path, "3-xpupool")),
        ]
        try:
            for phase, scheduler, start in phases:
                pods = mix(f"p{phase[0]}", scheduler)
                with start():
                    create_all(kc.api, f"/api/v1/namespaces/{NS}/pods", pods)
                    names = {p["metadata"]["name"] for p in pods}
                    bound = wait_settled(kc, stand_in, names)
                got = hami_check(bins[CHECKER], kc, stand_in, tmp_path / f"state-{phase}.json")
                results[phase] = {
                    "created": len(pods),
                    "bound": bound,
                    **got["summary"],
                    "decoded_not_as_asked": len(got["asked"]),
                    "bound_by_phase": dict(bound_by_prefix(kc)),
                }
                print(f"{phase}: {json.dumps(results[phase])}")
                assert_clean(phase, got)
        finally:
            stand_in.stop()
            (tmp_path / "switch-results.json").write_text(json.dumps(results, indent=2))
        assert stand_in.error is None, stand_in.error
        # Every bind of either scheduler took HAMi's lock naming its pod: each served pod
        # released one.
        assert stand_in.released == stand_in.patched, (stand_in.released, stand_in.patched)
        for phase in results:
            assert results[phase]["bound"] > 0, (phase, results[phase])


def bound_by_prefix(kc: K8sCluster) -> Counter[str]:
    """Bound pods by the phase that created them (``p1``, ``p2``, ``p3``)."""
    pods = list_all(kc.api, f"/api/v1/namespaces/{NS}/pods")
    return Counter(p["metadata"]["name"][:2] for p in pods if p["spec"].get("nodeName"))


def synthetic_pod(name: str, node: str, allocated: str, bind_time: int) -> dict[str, Any]:
    """A pod bound to ``node`` as either scheduler leaves it: one container of one card,
    HAMi's annotations with ``allocated`` as both allocated and to-allocate."""
    pod = mix("x", XPUPOOL)[0]
    pod["metadata"]["name"] = name
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-devices-allocated": allocated,
        "hami.io/vgpu-devices-to-allocate": allocated,
        "hami.io/bind-time": str(bind_time),
        "hami.io/bind-phase": "success",
    }
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def test_the_checker_sees_overcommit_bad_annotations_and_lockless_lookups(tmp_path: Path) -> None:
    """The checker is not vacuous: on one node of 8 cards (no cluster), a card charged twice its
    memory is over capacity, an annotation HAMi cannot parse is a decode error, and two pods
    bound in the same second without a lock, admitted in the order ``b`` then ``a``, are served
    the wrong way round (HAMi's lockless lookup takes the first Pending pod by name), while the
    same admissions with the lock each scheduler writes are served right."""
    checker = require_binaries((CHECKER,))[CHECKER]
    node = node_objects(1, 7, HAMI_SPLIT)[0]
    name = node["metadata"]["name"]
    card = json.loads(node["metadata"]["annotations"][REGISTER])[0]
    uuid, mib = card["id"], card["devmem"]
    half = f"{uuid},NVIDIA,{mib // 2 + 1},50:;"
    pods = [
        synthetic_pod("a", name, half, 1000),
        synthetic_pod("b", name, half, 1000),
        synthetic_pod("c", name, f"{uuid},NVIDIA,lots,10:;", 1000),
    ]
    lockless = {f"{NS}/b": {"lock": "", "at": 1000.5}, f"{NS}/a": {"lock": "", "at": 1000.7}}
    locked = {
        f"{NS}/b": {"lock": f"1970-01-01T00:16:40Z,{NS},b", "at": 1000.5},
        f"{NS}/a": {"lock": f"1970-01-01T00:16:40Z,{NS},a", "at": 1000.7},
    }
    answers = {}
    for label, admissions in (("lockless", lockless), ("locked", locked)):
        path = tmp_path / f"{label}.json"
        path.write_text(json.dumps({"nodes": [node], "pods": pods, "admissions": admissions}))
        out = subprocess.run([str(checker), "-in", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        answers[label] = json.loads(out.stdout)
    got = answers["lockless"]
    assert got["summary"]["decode_errors"] == 1, got["pods"]
    assert [c["over"] for c in got["cards"]] == [["memory"]], got["cards"]
    served = {a["pod"]: a["served"] for a in got["admissions"]}
    assert served[f"{NS}/b"] == f"{NS}/a", got["admissions"]
    assert got["summary"]["served_own_pod"] < 2, got["admissions"]
    served = {a["pod"]: a["served"] for a in answers["locked"]["admissions"]}
    assert served[f"{NS}/b"] == f"{NS}/b" and served[f"{NS}/a"] == f"{NS}/a", answers["locked"]
    assert answers["locked"]["summary"]["locks_left"] == 0
