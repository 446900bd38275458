"""Submit -> bound across three Kubernetes sites behind one plane (issue 51's second benchmark).

    python bench/k8s_federation.py --nodes 100 --jobs 300 --json

Three real control planes as local processes (one etcd, the first site's, with a key prefix
per site; per site a kube-apiserver, kube-scheduler with ``xpupool k8s extender`` as its
extender, kwok: ``bench/k8s_harness.py``'s cluster, the e2e tests' ``cluster.py``), ``--nodes``
kwok nodes per site of 8 cards each, of a card mix of each site's own (:data:`MIXES`: a training
site of A100 and H100, a mixed one, an inference site of L20 and T4), models drawn with a seed of
each site's own, and
``xpupool up --sites`` (a real process, SQLite) managing the three as sites ``gpu-a``,
``gpu-b``, ``gpu-c``, joined by links of 100, 25 and 10 Gbit/s. ``--jobs`` jobs of one card that
name no site (``nvidia:1``, an image, tenant ``bench``) are submitted through the API at
``--rate`` jobs a second (8 in flight at most, ``bench/k8s_plane.py``'s pacing): the plane's
engine places each over the three sites' nodes and the pod is made in the site of the node. A
watch of the tenant's namespace in each cluster stamps each pod when first seen and when first
seen bound.

- ``bound_p50_ms`` / ``bound_p99_ms``: POST of the job sent -> its pod first seen with
  ``spec.nodeName``, in whichever site; ``created_p50_ms`` / ``created_p99_ms``: -> first seen.
- ``per_site``: how many of the jobs each site ran; ``cards_by_model``: each site's cards by
  model, as drawn.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from k8s_harness import (
    CARDS_PER_NODE,
    HAMI_SPLIT,
    MANAGED,
    MODELS,
    PRODUCT_LABEL,
    BindWatcher,
    PodAsk,
    cluster,
    create_all,
    warm_extender,
)
from k8s_harness import node_objects as site_nodes
from k8s_plane import NAMESPACE, TENANT, ms, pod_name, server_proc, submit_paced, wait

SITES = ("gpu-a", "gpu-b", "gpu-c")
LINKS = (("gpu-a", "gpu-b", 100), ("gpu-b", "gpu-c", 25), ("gpu-a", "gpu-c", 10))
SPEC = "nvidia:1"  # no site: the plane chooses
MIXES: dict[str, tuple[float, ...]] = {  # per site, weights of k8s_harness.MODELS' models
    "gpu-a": (0.6, 0.4, 0.0, 0.0),  # training: A100, H100
    "gpu-b": (0.3, 0.1, 0.4, 0.2),  # mixed: every model
    "gpu-c": (0.0, 0.0, 0.4, 0.6),  # inference: L20, T4
}


def renamed(nodes: list[dict[str, Any]], site: str) -> list[dict[str, Any]]:
    """``nodes`` with their names and card ids under ``site`` (``gpu-00007`` -> ``gpu-a-00007``):
    the plane holds every site's nodes in one pool, where names and UUIDs are unique."""
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        text = json.dumps(node).replace(f"{name}", f"{site}-{name.removeprefix('gpu-')}")
        out.append(json.loads(text))
    return out


def cards_by_model(n_nodes: int, seed: int, weights: tuple[float, ...]) -> dict[str, int]:
    """The cards of a site of ``n_nodes`` drawn as :func:`one_site` draws them, by model token."""
    tokens = {m.product: m.token for m in MODELS}
    found: Counter[str] = Counter()
    for node in site_nodes(n_nodes, seed, HAMI_SPLIT, weights):
        found[tokens[node["metadata"]["labels"][PRODUCT_LABEL]]] += CARDS_PER_NODE
    return dict(sorted(found.items()))


@contextmanager
def one_site(
    workdir: Path,
    site: str,
    n_nodes: int,
    seed: int,
    etcd: tuple[str, str] | None,
    mix: tuple[float, ...] | None = None,
) -> Iterator[Any]:
    """The cluster of ``site`` with its nodes and its extender (ready, warmed), on ``etcd``
    (url, key prefix; None: an etcd of its own); yields it. ``mix``: its card mix (default
    :data:`MIXES`' for ``site``; the e2e harness of issue 51 narrows one so that a model is
    one site's only)."""
    port = cluster.free_port()
    ext_conf = cluster.Extender(
        url_prefix=f"http://127.0.0.1:{port}", weight=10, managed_resources=MANAGED
    )
    with cluster.K8sCluster(workdir / site, extender=ext_conf, kwok=True, etcd=etcd) as kc:
        nodes = site_nodes(n_nodes, seed, HAMI_SPLIT, MIXES[site] if mix is None else mix)
        create_all(kc.api, "/api/v1/nodes", renamed(nodes, site))
        ext = cluster.ExtenderProcess(kc.kubeconfig, port, workdir / f"{site}-extender.log")
        ext.start()
        try:
            # an ask no node holds: a share the warm-up's filter held would be a card the plane
            # does not know is taken (it pins its pods to cards)
            warm_extender(
                ext.url, kc.api, cluster.SCHEDULER_NAME, PodAsk("warm-up", CARDS_PER_NODE + 1)
            )
            yield kc
        finally:
            ext.stop()


def run(
    n_nodes: int, n_jobs: int, rate: float, seed: int, workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    with ExitStack() as stack:
        t0 = time.monotonic()
        clusters: dict[str, Any] = {}
        for i, site in enumerate(SITES):  # one etcd, the first site's: a key prefix per site
            etcd = None if not clusters else (clusters[SITES[0]].etcd_url, f"/{site}")
            clusters[site] = stack.enter_context(one_site(workdir, site, n_nodes, seed + i, etcd))
        log(f"three sites of {n_nodes} nodes in {time.monotonic() - t0:.1f} s")
        sites = workdir / "sites.yaml"
        sites.write_text(
            "sites:\n"
            + "".join(
                f"  - name: {site}\n    kubeconfig: {kc.kubeconfig}\n    create_namespaces: true\n"
                for site, kc in clusters.items()
            )
            + "links:\n"
            + "".join(f"  - {{sites: [{a}, {b}], bandwidth_gbps: {g}}}\n" for a, b, g in LINKS)
        )
        limits = ("--rate-limit", "0", "--address-rate-limit", "0")  # one token, one address
        srv = server_proc.ServerProc(workdir / "data", extra_args=("--sites", str(sites), *limits))
        with srv, srv.tenant_client(TENANT) as user:

            def listed() -> int:
                r = httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers(), timeout=60)
                return sum(1 for n in r.json() if n["site"] in SITES)

            wait(lambda: listed() == n_nodes * len(SITES), "the plane's nodes of three sites")
            log("the plane lists every node")
            watchers = {
                site: BindWatcher(kc.api_url, cluster.TOKEN, NAMESPACE).start()
                for site, kc in clusters.items()
            }
            try:
                sent = submit_paced(user, n_jobs, rate, SPEC)
                names = {pod_name(j): at for j, at in sent.items()}

                def all_bound() -> bool:
                    if any(w.error is not None for w in watchers.values()):
                        return True
                    return all(any(n in w.bound for w in watchers.values()) for n in names)

                wait(all_bound, f"{n_jobs} pods bound")
            finally:
                for w in watchers.values():
                    w.stop()
            for site, w in watchers.items():
                if w.error is not None:
                    raise RuntimeError(f"the pod watch of {site} failed") from w.error
            log(f"{n_jobs} jobs bound")
            seen = {n: t for w in watchers.values() for n, t in w.seen.items()}
            bound = {n: t for w in watchers.values() for n, t in w.bound.items()}
            return {
                "sites": len(SITES),
                "nodes_per_site": n_nodes,
                "jobs": n_jobs,
                "rate": rate,
                "created_p50_ms": ms([seen[n] - at for n, at in names.items()], 50),
                "created_p99_ms": ms([seen[n] - at for n, at in names.items()], 99),
                "bound_p50_ms": ms([bound[n] - at for n, at in names.items()], 50),
                "bound_p99_ms": ms([bound[n] - at for n, at in names.items()], 99),
                "per_site": {
                    site: sum(1 for n in names if n in w.bound) for site, w in watchers.items()
                },
                "cards_by_model": {
                    site: cards_by_model(n_nodes, seed + i, MIXES[site])
                    for i, site in enumerate(SITES)
                },
            }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100, help="kwok nodes per site")
    parser.add_argument("--jobs", type=int, default=300, help="timed jobs, one card each")
    parser.add_argument("--rate", type=float, default=50.0, help="jobs a second (0: at once)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep logs here [default: a temp dir]")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    if args.nodes < 1 or args.jobs < 1 or args.rate < 0:
        parser.error("--nodes and --jobs must be at least 1, --rate at least 0")
    if args.jobs > args.nodes * CARDS_PER_NODE * len(SITES):
        parser.error("more jobs than cards in the three sites")

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="xpupool-bench-k8s-federation-") as tmp:
        root = args.workdir or Path(tmp)
        for part in (*SITES, "data"):
            shutil.rmtree(root / part, ignore_errors=True)  # a kept workdir starts empty
        root.mkdir(parents=True, exist_ok=True)
        out = run(args.nodes, args.jobs, args.rate, args.seed, root, log)
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
