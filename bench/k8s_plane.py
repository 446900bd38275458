"""The control plane in front of a Kubernetes site (issue 49): submit -> pod created and submit ->
pod bound latency, jobs admitted per second, the plane's CPU per job, and the time a restarted
plane takes to reconcile the pods of its held jobs.

    python bench/k8s_plane.py --nodes 200 --jobs 400 --restart-pods 200 --json

A real control plane as local processes (etcd, kube-apiserver v1.36.3, kube-scheduler with
``xpupool k8s extender`` as its extender, kwok v0.8.0 with upstream's stages: bound pods run until
deleted), ``--nodes`` kwok nodes of 8 cards of four NVIDIA models with HAMi's registration
annotation (``bench/k8s_harness.py``), and ``xpupool up --sites`` (a real process, SQLite) managing
the cluster as site ``gpu-a`` (its per-token and per-address rate limits off: one client sends
every job). Once the plane lists every node and the extender has made its first
filter, ``--jobs`` jobs of one card (``nvidia:1 site=gpu-a``, an image, tenant ``bench``) are
submitted through the API at ``--rate`` jobs a second (each at its slot, 8 in flight at most).
A watch of the tenant's namespace stamps each pod locally when it is first seen and when first
seen bound (the pods' ``creationTimestamp`` has 1 s resolution).

- ``created_p50_ms`` / ``created_p99_ms``: POST of the job sent -> its pod first seen.
- ``bound_p50_ms`` / ``bound_p99_ms``: POST sent -> its pod first seen with ``spec.nodeName``.
- ``admitted_per_s``: jobs whose pod was made / first POST sent -> last pod seen; bounded by
  ``--rate``.
- ``plane_cpu_s_per_job``: user + system CPU seconds of the plane's process (``/proc/PID/stat``)
  from the first POST until every pod is bound, over ``--jobs``.
- ``cpu_ms_per_job``: the same span's CPU milliseconds per job of every process of the stack, by
  name (``plane``, ``extender``, and the cluster's ``etcd``, ``kube-apiserver``,
  ``kube-scheduler``, ``kwok``), and ``host``: all of the host's CPUs (``/proc/stat``), this
  script and whatever else runs beside it included. Their sum over the host's CPUs bounds the
  jobs a second this host can keep, with or without the plane.

``--compare-rounds R`` (0: skipped), after the timed jobs: the site's pods a second with and
without the plane in front, interleaved, R rounds of each: ``direct``, ``--compare-pods`` one-card
pods created straight in namespace ``bench-direct`` (16 POSTs in flight, as a controller makes
them; HAMi's resources, the extender binds them); ``plane``, as many jobs submitted through the
API as it takes them (8 in flight). Each round's figure: its pods / its first POST -> its last pod
seen bound; they are then deleted (the jobs cancelled) and gone before the next round.
``direct_pods_per_s`` and ``plane_pods_per_s``: each round's; ``plane_over_direct``: the ratio of
their medians.

``--restart-pods K`` (0: skipped): the timed jobs beyond the first K are cancelled, or jobs are
added (as fast as the API takes them, untimed) until K run, each with its pod Running; the plane is
killed (SIGKILL, as a crash) and started again on the same data. ``--restart-share S``: each added
job asks 1/S of a card (``mem=1Gi cores=<100/S>%``; HAMi's registration lets 10 tasks share a card),
so that K pods need K / (8 S) nodes, not K / 8. ``reconcile_s``: the restarted
``up`` started -> the stamp of its log line saying that the site reconciled every held job with
the cluster (the site's adopt task: each job's pods listed and matched, none made or deleted;
it may end before ``/healthz`` answers); ``restart_up_s``: until ``/healthz`` answers. The run
checks that every pod is still there under the same uid. ``--profile-restart PATH``: py-spy
(``--idle --threads``, collapsed stacks) records the restarted plane from its start until that log
line, into PATH. ``restart_plane_cpu_s``: the restarted plane's CPU seconds (all its threads)
until that line is seen, and ``restart_host_cpu_s`` the host's (every process, all CPUs) over the
same span, with ``restart_load1``, the host's one-minute load average as the plane was killed:
the wall time depends on what else the host runs, these say what the plane itself spent.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np

from k8s_harness import (
    CARDS_PER_NODE,
    HAMI_SPLIT,
    MANAGED,
    ROOT,
    BindWatcher,
    PodAsk,
    cluster,
    create_all,
    hami_pod,
    list_all,
    node_objects,
    warm_extender,
)

SITE = "gpu-a"
TENANT = "bench"
NAMESPACE = f"xpupool-{TENANT}"  # the site's default tenant namespace
DIRECT = "bench-direct"  # the namespace of the pods made without the plane (--compare-rounds)
SPEC = f"nvidia:1 site={SITE}"
IMAGE = "registry.invalid/sleep:1"  # kwok runs it until deleted
IN_FLIGHT = 8
SETTLE_S = 300.0  # the most a phase waits for the cluster or the plane before it gives up


def _load_server_proc() -> ModuleType:
    """``tests/integration/server_proc.py`` (``ServerProc``: ``xpupool up`` as a process), the
    one the e2e tests use, loaded by path as the harness loads ``cluster.py``."""
    path = ROOT / "tests" / "integration" / "server_proc.py"
    spec = importlib.util.spec_from_file_location("xpupool_bench_server_proc", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


server_proc = _load_server_proc()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, all its threads (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_cpu_s() -> float:
    """Busy CPU seconds of the whole host since boot, all CPUs (``/proc/stat``: all but idle
    and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def stack_cpu_s(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds of each named process of the stack, and ``host``'s (:func:`host_cpu_s`)."""
    return {**{name: cpu_s(pid) for name, pid in pids.items()}, "host": host_cpu_s()}


def wait(
    check: Callable[[], bool], what: str, timeout_s: float = SETTLE_S, every_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def pod_name(job_id: int) -> str:
    return f"xp-{job_id}-0-1"  # replica 0, attempt 1


def submit_paced(user: httpx.Client, n: int, rate: float, spec: str = SPEC) -> dict[int, float]:
    """``n`` jobs of ``spec``, job ``i`` sent at its slot ``i / rate`` (0: at once), at most
    :data:`IN_FLIGHT` in flight; job id -> ``time.monotonic()`` its POST was sent."""
    sent: dict[int, float] = {}
    lock = threading.Lock()
    t0 = time.monotonic()

    def one(i: int) -> None:
        if rate > 0:
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        at = time.monotonic()
        r = user.post("/v1/jobs", json={"spec": spec, "image": IMAGE})
        deadline = at + SETTLE_S
        while r.status_code == 429 and time.monotonic() < deadline:  # the tenant's pending cap
            time.sleep(0.5)  # (1,000 by default: untimed restart jobs outrun the site)
            r = user.post("/v1/jobs", json={"spec": spec, "image": IMAGE})
        if r.status_code != 201:
            raise RuntimeError(f"job {i}: HTTP {r.status_code}: {r.text[-500:]}")
        with lock:
            sent[int(r.json()["id"])] = at

    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for _ in pool.map(one, range(n)):
            pass
    return sent


def ms(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1e3, q)), 1)


def pods_now(kc: Any) -> dict[str, str]:
    """Name -> uid of the tenant namespace's pods, if every one is Running and none is being
    deleted; else empty (also when the API server, busy with 10,000 pods, answers 5xx: asked
    again)."""
    try:
        pods = list_all(kc.api, f"/api/v1/namespaces/{NAMESPACE}/pods")
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code < 500:
            raise
        return {}
    for p in pods:
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") != "Running":
            return {}
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def rate_of(watcher: BindWatcher, sent: dict[str, float]) -> float:
    """Pods a second of one round: its pods over its first send -> its last pod seen bound."""
    wait(lambda: all(n in watcher.bound for n in sent), f"{len(sent)} pods bound")
    span = max(watcher.bound[n] for n in sent) - min(sent.values())
    return round(len(sent) / span, 1)


def gone(kc: Any, namespace: str, names: set[str]) -> None:
    """Wait until no pod of ``names`` is left in ``namespace``."""

    def left() -> bool:
        pods = list_all(kc.api, f"/api/v1/namespaces/{namespace}/pods")
        return not any(p["metadata"]["name"] in names for p in pods)

    wait(lambda: not left(), f"{len(names)} pods of {namespace} gone")


def compare(
    kc: Any, user: httpx.Client, rounds: int, n: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """The site's pods a second without and with the plane in front, ``rounds`` of each,
    interleaved (the module's docstring)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DIRECT}}
    create_all(kc.api, "/api/v1/namespaces", [body])
    direct: list[float] = []
    plane: list[float] = []
    watchers = {
        ns: BindWatcher(kc.api_url, cluster.TOKEN, ns).start() for ns in (DIRECT, NAMESPACE)
    }
    try:
        for k in range(rounds):
            pods = [hami_pod(PodAsk(f"d-{k}-{i}", 1), cluster.SCHEDULER_NAME) for i in range(n)]
            for pod in pods:
                pod["metadata"]["namespace"] = DIRECT
            sent = create_all(kc.api, f"/api/v1/namespaces/{DIRECT}/pods", pods)
            direct.append(rate_of(watchers[DIRECT], sent))
            kc.api.delete(f"/api/v1/namespaces/{DIRECT}/pods", timeout=SETTLE_S).raise_for_status()
            gone(kc, DIRECT, set(sent))
            jobs = submit_paced(user, n, 0)
            plane.append(rate_of(watchers[NAMESPACE], {pod_name(j): at for j, at in jobs.items()}))
            for job_id in jobs:
                r = user.post(f"/v1/jobs/{job_id}/cancel")
                if r.status_code != 200:
                    raise RuntimeError(f"cancel {job_id}: HTTP {r.status_code}: {r.text}")
            gone(kc, NAMESPACE, {pod_name(j) for j in jobs})
            log(f"round {k + 1}: direct {direct[-1]} pods/s, plane {plane[-1]} pods/s")
    finally:
        for watcher in watchers.values():
            watcher.stop()
    for watcher in watchers.values():
        if watcher.error is not None:
            raise RuntimeError("the pod watch failed") from watcher.error
    return {
        "compare_pods": n,
        "direct_pods_per_s": direct,
        "plane_pods_per_s": plane,
        "plane_over_direct": round(float(np.median(plane) / np.median(direct)), 2),
    }


def share_spec(share: int) -> str:
    """One job's ask of 1/``share`` of a card (:data:`SPEC` when ``share`` is 1)."""
    return SPEC if share == 1 else f"nvidia:1 mem=1Gi cores={100 // share}% site={SITE}"


class Profiler:
    """py-spy recording the next ``xpupool up`` that ``srv`` starts, from its start until
    :meth:`stop` (``--profile-restart``)."""

    def __init__(self, srv: Any, out: Path) -> None:
        self.srv, self.out = srv, out
        self.old = srv.proc
        self.spy: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._attach, daemon=True)
        self.thread.start()

    def _attach(self) -> None:
        deadline = time.monotonic() + 60
        while self.srv.proc is self.old and time.monotonic() < deadline:
            time.sleep(0.001)
        if self.srv.proc is self.old:
            return
        spy = Path(sys.executable).parent / "py-spy"
        argv = [str(spy), "record", "--pid", str(self.srv.proc.pid), "--idle", "--threads"]
        argv += ["--rate", "100", "--format", "raw", "--output", str(self.out)]
        self.spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.thread.join()
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded
            self.spy.wait(60)


def restart(
    kc: Any, srv: Any, user: httpx.Client, held: list[int], profile: Path | None = None
) -> dict[str, float]:
    """Kill the plane holding ``held`` (their pods all Running, no other pod left), start it
    again, time its reconciliation; checks that no pod was made again or deleted."""
    settle_s = max(SETTLE_S, len(held) / 10)  # pods made at 10 a second at least
    every_s = max(0.1, len(held) / 2000)  # a list of all pods each time: not too often
    wait(
        lambda: len(pods_now(kc)) == len(held),
        f"{len(held)} pods running, no other",
        settle_s,
        every_s,
    )

    def running_in_plane(job_id: int) -> bool:
        return bool(user.get(f"/v1/jobs/{job_id}").json().get("state") == "running")

    for job_id in (held[0], held[-1]):  # the first and the last made (the plane reads in order)
        wait(partial(running_in_plane, job_id), f"job {job_id} running in the plane")
    before = pods_now(kc)
    load1 = os.getloadavg()[0]
    srv.kill()
    offset = srv.log_path.stat().st_size
    line = f"site {SITE}: {len(held)} held jobs reconciled with the cluster"

    def reconciled() -> datetime | None:
        """When the log says so (its own stamp, ms: the line may come before ``/healthz``)."""
        with srv.log_path.open("rb") as f:
            f.seek(offset)
            for text in f.read().decode(errors="replace").splitlines():
                if line in text:
                    return datetime.strptime(text[:23], "%Y-%m-%d %H:%M:%S,%f")
        return None

    profiler = None if profile is None else Profiler(srv, profile)
    t0, wall0, host0 = time.monotonic(), datetime.now(), host_cpu_s()
    srv.start(same_port=True)
    up_s = time.monotonic() - t0
    wait(lambda: reconciled() is not None, f"the log line {line!r}", settle_s, 0.02)
    plane_cpu, host_cpu = cpu_s(srv.proc.pid), host_cpu_s() - host0
    if profiler is not None:
        profiler.stop()
    at = reconciled()
    assert at is not None
    reconcile_s = (at - wall0).total_seconds()
    after = pods_now(kc)
    if after != before:
        changed = sorted(set(before.items()) ^ set(after.items()))[:5]
        raise RuntimeError(f"pods changed across the restart: {changed}")
    return {
        "restart_up_s": round(up_s, 2),
        "reconcile_s": round(reconcile_s, 2),
        "restart_plane_cpu_s": round(plane_cpu, 2),
        "restart_host_cpu_s": round(host_cpu, 2),
        "restart_load1": round(load1, 2),
    }


def run(
    n_nodes: int,
    n_jobs: int,
    rate: float,
    restart_pods: int,
    seed: int,
    workdir: Path,
    log: Callable[[str], None],
    compare_rounds: int = 0,
    compare_pods: int = 200,
    restart_share: int = 1,
    profile: Path | None = None,
) -> dict[str, Any]:
    port = cluster.free_port()
    ext_conf = cluster.Extender(
        url_prefix=f"http://127.0.0.1:{port}", weight=10, managed_resources=MANAGED
    )
    with cluster.K8sCluster(workdir / "cluster", extender=ext_conf, kwok=True) as kc:
        t0 = time.monotonic()
        create_all(kc.api, "/api/v1/nodes", node_objects(n_nodes, seed, HAMI_SPLIT))
        log(f"{n_nodes} nodes in {time.monotonic() - t0:.1f} s")
        ext = cluster.ExtenderProcess(kc.kubeconfig, port, workdir / "extender.log").start()
        try:
            # an ask no node holds: a share the warm-up's filter held would be a card the
            # plane does not know is taken (it pins its pods to cards)
            unfit = PodAsk("warm-up", CARDS_PER_NODE + 1)
            warm_extender(ext.url, kc.api, cluster.SCHEDULER_NAME, unfit)
            sites = workdir / "sites.yaml"
            sites.write_text(
                f"sites:\n  - name: {SITE}\n    kubeconfig: {kc.kubeconfig}\n"
                "    create_namespaces: true\n"
            )
            limits = ("--rate-limit", "0", "--address-rate-limit", "0")  # one token, one address
            extra = ("--sites", str(sites), *limits)
            srv = server_proc.ServerProc(
                workdir / "data", extra_args=extra, start_timeout_s=SETTLE_S
            )
            with srv, srv.tenant_client(TENANT) as user:

                def site_nodes() -> int:
                    r = httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers(), timeout=60)
                    return sum(1 for n in r.json() if n["site"] == SITE)

                wait(lambda: site_nodes() == n_nodes, f"the plane's {n_nodes} nodes")
                log("the plane lists every node")
                watcher = BindWatcher(kc.api_url, cluster.TOKEN, NAMESPACE).start()
                assert ext.proc is not None
                pids = {
                    "plane": srv.proc.pid,
                    "extender": ext.proc.pid,
                    **{c.name: c.proc.pid for c in kc.components},
                }
                try:
                    before = stack_cpu_s(pids)
                    sent = submit_paced(user, n_jobs, rate)
                    names = {pod_name(j): at for j, at in sent.items()}
                    wait(
                        lambda: all(n in watcher.bound for n in names) or watcher.error is not None,
                        f"{n_jobs} pods bound",
                    )
                    after = stack_cpu_s(pids)
                finally:
                    watcher.stop()
                if watcher.error is not None:
                    raise RuntimeError("the pod watch failed") from watcher.error
                log(f"{n_jobs} jobs bound")
                created = [watcher.seen[n] - at for n, at in names.items()]
                bound = [watcher.bound[n] - at for n, at in names.items()]
                span = max(watcher.seen[n] for n in names) - min(names.values())
                out: dict[str, Any] = {
                    "nodes": n_nodes,
                    "jobs": n_jobs,
                    "rate": rate,
                    "created_p50_ms": ms(created, 50),
                    "created_p99_ms": ms(created, 99),
                    "bound_p50_ms": ms(bound, 50),
                    "bound_p99_ms": ms(bound, 99),
                    "admitted_per_s": round(n_jobs / span, 1) if span > 0 else None,
                    "plane_cpu_s_per_job": round((after["plane"] - before["plane"]) / n_jobs, 4),
                    "cpu_ms_per_job": {
                        name: round((after[name] - before[name]) * 1e3 / n_jobs, 1)
                        for name in after
                    },
                    "host_cpus": os.cpu_count(),
                    "restart_pods": restart_pods,
                }
                if compare_rounds:
                    out.update(compare(kc, user, compare_rounds, compare_pods, log))
                if restart_pods:
                    held = sorted(sent)[:restart_pods]
                    for job_id in sorted(sent)[restart_pods:]:
                        r = user.post(f"/v1/jobs/{job_id}/cancel")
                        if r.status_code != 200:
                            raise RuntimeError(f"cancel {job_id}: HTTP {r.status_code}: {r.text}")
                    spec = share_spec(restart_share)
                    held += sorted(submit_paced(user, restart_pods - len(held), 0, spec))
                    out["restart_share"] = restart_share
                    out.update(restart(kc, srv, user, held, profile))
                    log(f"restart with {restart_pods} pods: {out['reconcile_s']} s")
        finally:
            ext.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=200, help="timed jobs, one card each")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs a second (0: at once)")
    parser.add_argument(
        "--restart-pods", type=int, default=200, help="pods held at the restart (0: no restart)"
    )
    parser.add_argument(
        "--compare-rounds",
        type=int,
        default=0,
        help="rounds of pods made without, then with, the plane (0: skipped)",
    )
    parser.add_argument("--compare-pods", type=int, default=200, help="pods a compare round")
    parser.add_argument(
        "--restart-share",
        type=int,
        default=1,
        help="jobs added for the restart ask 1/S of a card (1 to 10; 1: a whole card)",
    )
    parser.add_argument(
        "--profile-restart", type=Path, help="py-spy's collapsed stacks of the restarted plane"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep logs here [default: a temp dir]")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    if args.nodes < 1 or args.jobs < 1 or args.rate < 0:
        parser.error("--nodes and --jobs must be at least 1, --rate at least 0")
    if args.restart_pods < 0:
        parser.error("--restart-pods must be at least 0")
    cards = args.nodes * CARDS_PER_NODE
    if args.jobs > cards:
        parser.error(f"more jobs than cards: --nodes N holds {CARDS_PER_NODE} * N one-card jobs")
    if not 1 <= args.restart_share <= HAMI_SPLIT:
        parser.error(f"--restart-share must be 1 to {HAMI_SPLIT}")
    kept = min(args.jobs, args.restart_pods)  # timed jobs kept, a card each
    if args.restart_pods - kept > (cards - kept) * args.restart_share:
        parser.error("more restart pods than the cards hold: raise --nodes or --restart-share")
    if args.compare_rounds < 0 or args.compare_pods < 1:
        parser.error("--compare-rounds must be at least 0, --compare-pods at least 1")
    if args.compare_rounds and args.jobs + args.compare_pods > args.nodes * CARDS_PER_NODE:
        parser.error("more pods than cards: --jobs plus --compare-pods must fit 8 cards a node")

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="xpupool-bench-k8s-plane-") as tmp:
        root = args.workdir or Path(tmp)
        shutil.rmtree(root / "cluster", ignore_errors=True)  # a kept workdir starts empty
        shutil.rmtree(root / "data", ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        out = run(
            args.nodes,
            args.jobs,
            args.rate,
            args.restart_pods,
            args.seed,
            root,
            log,
            args.compare_rounds,
            args.compare_pods,
            args.restart_share,
            args.profile_restart,
        )
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
