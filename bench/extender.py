"""Latency of the extender's ``/filter`` at fleet size, and the time to place 64 pods through its
verbs, over real HTTP against a real ``xpupool k8s extender`` process.

    python bench/extender.py --nodes 5000 --json

A real kube-apiserver v1.36.3 (with etcd; no kube-scheduler, no kwok) gets ``--nodes`` Nodes of 8
cards of four NVIDIA models, created through the API with HAMi's registration annotation (the
time it takes is ``nodes_create_s``); then ``xpupool k8s extender`` starts as its own process
(``xpupool.cli``, the command the Helm chart runs, not the ASGI app in this process: the server
with its informers, lock and thread pool is what kube-scheduler meets) and lists them. Its first
filter and prioritize are made before any timing (``warmup_s``: what a profile builds once).

``filter_p50_ms`` / ``filter_p99_ms``: ``--filters`` sequential ``POST /filter`` calls, one
keep-alive connection, each with the body kube-scheduler sends a ``nodeCacheCapable`` extender
(``{"Pod": <the Pod as the apiserver returned it>, "Nodes": null, "NodeNames": [every node]}``),
cycling over eight pods of the benchmark stream's shapes (shares, an amount of memory, whole,
multi-card, typed), each call with a fresh pod UID so the extender reads the pod anew, as it does
a pod's first attempt; client-side round trip, body encoded before the clock starts. Each answer
holds its node's shares for the pod, as for kube-scheduler's pods, until the hold lapses unbound
(30 s); the 500 filters hold a few percent of the pool's cards.

``gang64_s``: a gang of 64 half-card pods (``xpupool.io/gang`` and ``xpupool.io/gang-size: 64``,
created through the API with a scheduler name nobody serves) placed as kube-scheduler places
pods: one scheduling cycle after another (filter over every node, prioritize over the nodes
that fit, the best-scored node, first by name among equals), each bind on a thread of its own as
kube-scheduler's binding cycles run; a member's bind returns once the whole gang has reached
bind. From the first filter to the last bind's answer. Every member is checked bound afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from k8s_harness import NS, PodAsk, cluster, create_all, hami_pod, node_objects, warm_extender

SCHEDULER = "nobody"  # no scheduler serves it: the benchmark is kube-scheduler here
TEMPLATES = (
    PodAsk("filter-share-10", 1, memory_pct=10, cores_pct=10),
    PodAsk("filter-share-25", 1, memory_pct=25, cores_pct=25),
    PodAsk("filter-share-50-a100", 1, memory_pct=50, cores_pct=50, model="A100"),
    PodAsk("filter-mem-8g", 1, memory_mib=8192, cores_pct=20),
    PodAsk("filter-whole", 1),
    PodAsk("filter-whole-l20", 1, model="L20"),
    PodAsk("filter-four", 4),
    PodAsk("filter-eight-h100", 8, model="H100"),
)


GANG = 64


def gang_member(i: int) -> dict[str, Any]:
    """Member ``i`` of the benchmark's gang: half a card each, all or none."""
    pod = hami_pod(PodAsk(f"gang-{i:02d}", 1, memory_pct=50, cores_pct=50), SCHEDULER)
    pod["metadata"].setdefault("annotations", {}).update(
        {"xpupool.io/gang": "bench-gang", "xpupool.io/gang-size": str(GANG)}
    )
    return pod


def bind_alone(url: str, pod: dict[str, Any], node: str) -> None:
    """A binding cycle on a connection of its own (kube-scheduler binds in goroutines)."""
    with httpx.Client(base_url=url, timeout=60) as client:
        bind(client, pod, node)


def created(api: httpx.Client, pod: dict[str, Any]) -> dict[str, Any]:
    """Create ``pod``; the apiserver's object (uid, defaults): what kube-scheduler would send."""
    r = api.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
    if r.status_code != 201:
        raise RuntimeError(f"pod {pod['metadata']['name']}: HTTP {r.status_code}: {r.text}")
    return dict(r.json())


def post(client: httpx.Client, verb: str, body: bytes) -> Any:
    r = client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
    if r.status_code != 200:
        raise RuntimeError(f"/{verb}: HTTP {r.status_code}: {r.text[:500]}")
    out = r.json()
    if isinstance(out, dict) and out.get("Error"):
        raise RuntimeError(f"/{verb}: {out['Error']}")
    return out


def choose(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> str:
    """A scheduling cycle: filter, prioritize, the best node."""
    body = {"Pod": pod, "Nodes": None, "NodeNames": names}
    fits = post(client, "filter", json.dumps(body).encode())["NodeNames"] or []
    if not fits:
        raise RuntimeError(f"{pod['metadata']['name']}: no node fits")
    scores = post(client, "prioritize", json.dumps({**body, "NodeNames": fits}).encode())
    best = max(
        scores or [{"Host": fits[0], "Score": 0}],
        key=lambda h: (h["Score"], -fits.index(h["Host"])),
    )
    return str(best["Host"])


def bind(client: httpx.Client, pod: dict[str, Any], node: str) -> None:
    """A binding cycle."""
    meta = pod["metadata"]
    binding = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node,
    }
    post(client, "bind", json.dumps(binding).encode())


def run(
    n_nodes: int, n_filters: int, seed: int, workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    with cluster.K8sCluster(workdir / "cluster", scheduler=False) as kc:
        nodes = node_objects(n_nodes, seed, gpu_per_card=10)
        t0 = time.monotonic()
        create_all(kc.api, "/api/v1/nodes", nodes)
        nodes_create_s = time.monotonic() - t0
        log(f"{n_nodes} nodes created in {nodes_create_s:.1f} s")
        names = [n["metadata"]["name"] for n in nodes]
        ext = cluster.ExtenderProcess(kc.kubeconfig, cluster.free_port(), workdir / "extender.log")
        t0 = time.monotonic()
        ext.start()
        try:
            start_s = time.monotonic() - t0
            warmup_s = warm_extender(ext.url, kc.api, SCHEDULER)
            log(f"extender ready in {start_s:.1f} s, warm-up {warmup_s:.1f} s")
            templates = [created(kc.api, hami_pod(a, SCHEDULER)) for a in TEMPLATES]
            bodies = [
                json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}).encode()
                for p in templates
            ]
            with httpx.Client(base_url=ext.url, timeout=60) as client:
                first = post(client, "filter", bodies[0])
                if len(first["NodeNames"] or []) != 1:  # the engine's choice, of every node
                    raise RuntimeError(f"filter answered {first['NodeNames']!r}, not one node")
                lat = []
                for i in range(n_filters):
                    pod = templates[i % len(templates)]
                    fresh = {**pod, "metadata": {**pod["metadata"], "uid": str(uuid.uuid4())}}
                    body = json.dumps({"Pod": fresh, "Nodes": None, "NodeNames": names}).encode()
                    t0 = time.perf_counter()
                    post(client, "filter", body)
                    lat.append(time.perf_counter() - t0)
                log(f"{n_filters} filters done")
                gang = [created(kc.api, gang_member(i)) for i in range(GANG)]
                t0 = time.monotonic()
                with ThreadPoolExecutor(GANG) as binds:
                    done = [
                        binds.submit(bind_alone, ext.url, pod, choose(client, pod, names))
                        for pod in gang
                    ]
                    for f in done:
                        f.result()
                gang64_s = time.monotonic() - t0
            got = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
            unbound = [
                p["metadata"]["name"]
                for p in got
                if p["metadata"]["name"].startswith("gang-") and not p["spec"].get("nodeName")
            ]
            if unbound:
                raise RuntimeError(f"not bound after bind: {unbound[:5]}")
        finally:
            ext.stop()
    arr = np.asarray(lat) * 1e3
    return {
        "nodes": n_nodes,
        "filters": n_filters,
        "filter_p50_ms": round(float(np.percentile(arr, 50)), 2),
        "filter_p99_ms": round(float(np.percentile(arr, 99)), 2),
        "filter_max_ms": round(float(arr.max()), 2),
        "filter_body_bytes": max(len(b) for b in bodies),
        "gang64_s": round(gang64_s, 3),
        "nodes_create_s": round(nodes_create_s, 2),
        "extender_start_s": round(start_s, 2),
        "warmup_s": round(warmup_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--filters", type=int, default=500, help="timed /filter calls")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep logs here [default: a temp dir]")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    if args.nodes < 1 or args.filters < 1:
        parser.error("--nodes and --filters must be at least 1")

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="xpupool-bench-extender-") as tmp:
        root = args.workdir or Path(tmp)
        shutil.rmtree(root / "cluster", ignore_errors=True)  # a kept workdir: etcd starts empty
        root.mkdir(parents=True, exist_ok=True)
        out = run(args.nodes, args.filters, args.seed, root, log)
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
