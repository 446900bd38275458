"""The control plane manages a real local Kubernetes cluster as a site (issue 49, parts 1, 2
and 5): ``xpupool up --sites FILE`` (a real process) watches etcd + kube-apiserver +
kube-scheduler with xpupool's extender + kwok on 127.0.0.1; a job submitted through the API is
admitted by the plane's cycle, becomes a Pod in its tenant's namespace, is bound by the
extender, run by kwok, and its phases drive the job's states. Cancel deletes the pods, a
restarted plane reconciles without making a pod twice, a bad sites file and an image-less job
for the site are refused naming what is wrong.

kwok completes a pod whose image is :data:`DONE` after a short delay (a Stage of this module,
beside upstream's "fast" stages, which complete only pods that Jobs own); any other image runs
until deleted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import (
    Extender,
    ExtenderProcess,
    K8sCluster,
    find_binaries,
    free_port,
    require_binaries,
)

from xpupool.k8s.codec.allocation_audit import audit_allocations

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = pytest.mark.k8s

SITE = "gpu-a"
DONE = "registry.invalid/done:1"  # kwok completes it (this module's Stage)
SLEEP = "registry.invalid/sleep:1"  # runs until deleted
SLOW = "registry.invalid/slow:1"  # kwok completes it after 10 s (this module's second Stage)
MANAGED = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
COMPLETE_STAGE = f"""
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: xpupool-test-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.spec.containers.[].image'
      operator: 'In'
      values: ['{DONE}']
  delay:
    durationMilliseconds: 1500
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      containerStatuses:
      {{{{ range $index, $item := .spec.containers }}}}
      - image: {{{{ $item.image | Quote }}}}
        name: {{{{ $item.name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{{{ $now | Quote }}}}
            reason: Completed
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: Succeeded
"""
SLOW_STAGE = (
    COMPLETE_STAGE.replace("xpupool-test-complete", "xpupool-test-complete-slow")
    .replace(DONE, SLOW)
    .replace("durationMilliseconds: 1500", "durationMilliseconds: 10000")
)


def kwok_node(name: str, cards: int = 2) -> dict[str, Any]:
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-80GB",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(cards)
    ]
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(cards * 10)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {
                "hami.io/node-nvidia-register": json.dumps(register),
                "kwok.x-k8s.io/node": "fake",
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ServerProc]]:
    """The cluster (scheduler + extender + kwok, two kwok nodes of two A100s) and ``xpupool up``
    managing it as site :data:`SITE`."""
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok"))
    tmp = tmp_path_factory.mktemp("plane-site")
    port = free_port()
    extender = Extender(url_prefix=f"http://127.0.0.1:{port}", managed_resources=MANAGED)
    with K8sCluster(tmp / "cluster", extender=extender) as kc:
        bins = find_binaries(("kwok",))
        stages = tmp / "kwok-stages.yaml"
        stages.write_text(bins["kwok-stages"].read_text() + COMPLETE_STAGE + SLOW_STAGE)
        kwok_port = free_port()
        comp = kc._spawn(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={kc.kubeconfig}",
                f"--config={stages}",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
        )
        kc._wait(comp, f"http://127.0.0.1:{kwok_port}/healthz")
        ext = ExtenderProcess(kc.kubeconfig, port, tmp / "extender.log").start()
        try:
            for name in ("kw-0", "kw-1"):
                r = kc.api.post("/api/v1/nodes", json=kwok_node(name))
                assert r.status_code == 201, r.text
            sites = tmp / "sites.yaml"
            sites.write_text(
                f"sites:\n  - name: {SITE}\n    kubeconfig: {kc.kubeconfig}\n"
                "    create_namespaces: true\n"
            )
            cluster = tmp / "cluster.yaml"  # an agent-pool node whose name the cluster reuses
            cluster.write_text(
                "nodes:\n  - name: kw-dup\n    cpu: 8\n    memory: 32Gi\n    devices:\n"
                "      - {vendor: nvidia, model: NVIDIA Tesla T4, count: 1, memory: 15Gi}\n"
            )
            extra = ("--sites", str(sites))
            with ServerProc(tmp / "data", cluster=cluster, extra_args=extra) as srv:
                until(lambda: len(nodes(srv)) == 2, "the site's nodes in /v1/nodes", 60)
                yield kc, srv
        finally:
            ext.stop()


def nodes(srv: ServerProc) -> list[dict[str, Any]]:
    r = httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers())
    return [n for n in r.json() if n["site"] == SITE] if r.status_code == 200 else []


def job(srv: ServerProc, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers())
    assert r.status_code == 200, r.text
    return dict(r.json())


def state_is(srv: ServerProc, job_id: int, *states: str, timeout_s: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        got = job(srv, job_id)
        return got if got["state"] in states else None

    try:
        return dict(until(check, f"job {job_id} {'/'.join(states)}", timeout_s))
    except AssertionError:
        raise AssertionError(f"{job(srv, job_id)}\n{srv.log()}") from None


def pods(kc: K8sCluster, job_id: int) -> list[dict[str, Any]]:
    r = kc.api.get("/api/v1/pods", params={"labelSelector": f"xpupool.io/job={job_id}"})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


@pytest.fixture(scope="module")
def user(plane: tuple[K8sCluster, ServerProc]) -> Iterator[httpx.Client]:
    with plane[1].tenant_client("ml") as client:
        yield client


def submit(user: httpx.Client, **body: Any) -> int:
    r = user.post("/v1/jobs", json={"spec": f"A100:1 site={SITE}", **body})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_an_api_job_becomes_a_bound_pod_runs_and_succeeds(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    kc, srv = plane
    listed = nodes(srv)
    assert {n["source"] for n in listed} == {f"kubernetes:{SITE}"}
    r = user.put("/v1/secrets/token", json={"secret": "s3cret"}, timeout=60)  # the first seals
    assert r.status_code == 201, r.text
    secrets = [{"name": "token", "env": "TOKEN"}]
    job_id = submit(
        user, image=DONE, command=["python", "-c", "1"], env={"EPOCHS": "3"}, secrets=secrets
    )
    done = state_is(srv, job_id, "succeeded")
    events = " | ".join(e["reason"] for e in done.get("events", []))
    (pod,) = pods(kc, job_id)
    meta = pod["metadata"]
    assert meta["name"] == f"xp-{job_id}-0-1", events
    assert meta["namespace"] == "xpupool-ml"
    assert meta["labels"]["xpupool.io/tenant"] == "ml"
    # bound by kube-scheduler through the extender, on the node and card the plane chose
    node = pod["spec"]["nodeName"]
    assert f"on {node}" in events  # the plane's placement: the scheduled event names it
    assert f"GPU-{node}-" in meta["annotations"]["hami.io/vgpu-devices-allocated"]
    assert pod["spec"]["preemptionPolicy"] == "Never"
    env = pod["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "EPOCHS", "value": "3"}
    held = f"xp-{job_id}-1-secrets"  # the run's secrets, as a Secret of the namespace
    assert {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": held, "key": "token"}}} in env
    assert done["exit_code"] == 0


def secret_status(kc: K8sCluster, name: str, namespace: str = "xpupool-ml") -> int:
    return kc.api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}").status_code


def test_cancel_deletes_the_pods_and_the_job_ends_once_they_are_gone(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    kc, srv = plane
    r = user.put("/v1/secrets/token", json={"secret": "s3cret"}, timeout=60)  # the first seals
    assert r.status_code in (200, 201), r.text
    job_id = submit(user, image=SLEEP, secrets=[{"name": "token", "env": "TOKEN"}])
    state_is(srv, job_id, "running")
    held = f"xp-{job_id}-1-secrets"  # the run's secrets, as a Secret of the namespace
    r = kc.api.get(f"/api/v1/namespaces/xpupool-ml/secrets/{held}")
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"token": "czNjcmV0"}
    r = user.post(f"/v1/jobs/{job_id}/cancel")
    assert r.status_code == 200, r.text
    state_is(srv, job_id, "cancelled")
    until(lambda: not pods(kc, job_id), "the job's pods gone", 30)
    until(lambda: secret_status(kc, held) == 404, "the job's Secret gone", 30)
    # its card is free again: a job that needs every card of the site runs
    both = submit(user, image=DONE, spec=f"A100:2 replicas=2 site={SITE}")
    state_is(srv, both, "succeeded")


def test_a_restarted_plane_adopts_its_pods_without_making_any_twice(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    kc, srv = plane
    job_id = submit(user, image=SLEEP)
    state_is(srv, job_id, "running")
    (before,) = pods(kc, job_id)
    srv.kill()  # a crash: nothing flushed
    srv.start(same_port=True)  # the tenant's client finds it again
    until(lambda: len(nodes(srv)) == 2, "the site's nodes after the restart", 60)
    time.sleep(2)  # the site's worker reconciles; nothing must appear
    assert job(srv, job_id)["state"] == "running"
    (after,) = pods(kc, job_id)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert job(srv, job_id)["attempts"] == 1  # adopted, not run again
    assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    state_is(srv, job_id, "cancelled")


def test_the_plane_counts_each_pods_cards_once_and_frees_them_only_when_it_is_gone(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    """The site's four cards, each held by a running pod: a fifth job waits in the plane (no pod
    made); the bound pods' own annotations never over-commit a card (the audit); once one job is
    cancelled, the fifth gets its card only after that job's pod is gone."""
    kc, srv = plane
    held = [submit(user, image=SLEEP) for _ in range(4)]
    for job_id in held:
        state_is(srv, job_id, "running")
    waiting = submit(user, image=SLEEP)
    time.sleep(1)  # a cycle or more: it must stay without a pod
    assert job(srv, waiting)["state"] in ("pending", "admitted"), job(srv, waiting)
    assert not pods(kc, waiting)
    all_nodes = kc.api.get("/api/v1/nodes").json()["items"]
    bound = [p for j in held for p in pods(kc, j)]
    audit = audit_allocations(all_nodes, bound)
    assert audit.pods == 4 and not audit.over and not audit.unreadable, audit
    (victim,) = pods(kc, held[0])
    assert user.post(f"/v1/jobs/{held[0]}/cancel").status_code == 200
    state_is(srv, waiting, "running")
    r = kc.api.get(f"/api/v1/namespaces/xpupool-ml/pods/{victim['metadata']['name']}")
    assert r.status_code == 404, "the card was given again while the cancelled pod existed"
    bound = [p for j in (*held[1:], waiting) for p in pods(kc, j)]
    audit = audit_allocations(kc.api.get("/api/v1/nodes").json()["items"], bound)
    assert audit.pods == 4 and not audit.over, audit
    for job_id in (*held[1:], waiting):
        assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    for job_id in (*held[1:], waiting):
        state_is(srv, job_id, "cancelled")


def test_a_pod_not_of_the_planes_holds_its_card_and_the_job_waits_naming_it(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    """A pod the plane did not make (kubectl's, no queue label) bound to the site's last free
    card: the plane counts it as use (its watch of bound pods, the extender's annotations), so a
    job that needs that card stays pending in the plane, no pod made, with a reason naming the
    pod; once the pod is deleted, the job is admitted, bound and runs."""
    kc, srv = plane
    held = [submit(user, image=SLEEP) for _ in range(3)]
    for job_id in held:
        state_is(srv, job_id, "running")
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "by-kubectl", "namespace": "default"},
        "spec": {
            "schedulerName": "xpupool-scheduler",
            "containers": [
                {"name": "c", "image": SLEEP, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }
    r = kc.api.post("/api/v1/namespaces/default/pods", json=other)
    assert r.status_code == 201, r.text

    def bound() -> str:
        got = kc.api.get("/api/v1/namespaces/default/pods/by-kubectl").json()
        return str(got["spec"].get("nodeName") or "")

    node = until(bound, "the kubectl pod bound", 30)
    late = submit(user, image=SLEEP)

    def named() -> str:
        got = job(srv, late)
        return got["reason"] if "pod default/by-kubectl" in got["reason"] else ""

    why = until(named, "the job's reason naming the kubectl pod", 60)
    assert f"cards held outside the plane's queues: pod default/by-kubectl on {node}" in why, why
    assert job(srv, late)["state"] == "pending"
    assert not pods(kc, late)
    kc.api.delete("/api/v1/namespaces/default/pods/by-kubectl", params={"gracePeriodSeconds": "0"})
    state_is(srv, late, "running", timeout_s=120)
    for job_id in (*held, late):
        assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    for job_id in (*held, late):
        state_is(srv, job_id, "cancelled")


def test_a_node_deleted_from_the_cluster_requeues_its_job_elsewhere(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    """A Node deleted from the cluster is lost in the plane; its job is dealt with as a lost
    node's (requeued: its next attempt's pod on the other node), and the first run's pod, left
    with no kubelet, is deleted. The Node back, the plane's node is ready again."""
    kc, srv = plane
    job_id = submit(user, image=SLEEP)
    state_is(srv, job_id, "running")
    (first,) = pods(kc, job_id)
    gone = first["spec"]["nodeName"]
    assert kc.api.delete(f"/api/v1/nodes/{gone}").status_code == 200
    try:

        def second_run_only() -> list[dict[str, Any]]:
            now = pods(kc, job_id)
            names = [p["metadata"]["name"] for p in now]
            return now if names == [f"xp-{job_id}-0-2"] and now[0]["spec"].get("nodeName") else []

        try:
            (second,) = until(second_run_only, "the second run's pod alone, bound", 90)
        except AssertionError:
            names = [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods(kc, job_id)]
            raise AssertionError(f"{names}\n{job(srv, job_id)}\n{srv.log()}") from None
        assert second["spec"]["nodeName"] != gone
        state_is(srv, job_id, "running")
        status = {n["name"]: n["status"] for n in nodes(srv)}
        assert status[gone] == "lost", status
    finally:
        kc.api.post("/api/v1/nodes", json=kwok_node(gone))
    until(
        lambda: {n["name"]: n["status"] for n in nodes(srv)}.get(gone) == "ready",
        "the node ready again",
        30,
    )
    assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    state_is(srv, job_id, "cancelled")


def test_a_sites_nodes_never_change_another_sites_and_a_bad_one_stops_no_other(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    """A cluster Node named as an agent-pool node leaves that node as it is; a Node the plane's
    book cannot hold (a name of 64 characters, which Kubernetes allows) is left out, and a good
    Node after it registers."""
    kc, srv = plane
    long = kwok_node("k" * 64)
    del long["metadata"]["labels"]["kubernetes.io/hostname"]  # a label value holds 63
    try:
        for node in (kwok_node("kw-dup"), long, kwok_node("kw-2")):
            r = kc.api.post("/api/v1/nodes", json=node)
            assert r.status_code == 201, r.text
        until(lambda: len(nodes(srv)) == 3, "kw-2 registered", 30)
        r = httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers())
        listed = {n["name"]: n for n in r.json()}
        assert "k" * 64 not in listed
        dup = listed["kw-dup"]
        assert (dup["source"], dup["site"]) == ("cluster", "default")
        r = httpx.get(f"{srv.url}/v1/devices", headers=srv.headers())
        models = {d["model"] for d in r.json() if d["node"] == "kw-dup"}
        assert models == {"NVIDIA Tesla T4"}, models
    finally:
        for name in ("kw-dup", "k" * 64, "kw-2"):
            kc.api.delete(f"/api/v1/nodes/{name}")


def test_a_job_without_an_image_is_refused_for_the_site(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    r = user.post("/v1/jobs", json={"spec": f"A100:1 site={SITE}", "command": ["true"]})
    assert r.status_code == 422, r.text
    assert f"site {SITE} runs container images only" in r.text


def test_a_bad_sites_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "sites.yaml"
    bad.write_text("sites:\n  - {name: gpu-a, in_cluster: true, namespace: x}\n")
    argv = [sys.executable, "-c", "from xpupool.cli import main; main()", "up", "--no-agent"]
    argv += ["--data", str(tmp_path / "data"), "--port", str(free_port()), "--sites", str(bad)]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "sites[0].namespace" in out.stderr, out.stderr


def labelled(kind: str, name: str, job_id: int, site: str, **spec: Any) -> dict[str, Any]:
    labels = {"xpupool.io/job": str(job_id), "xpupool.io/plane-site": site}
    meta = {"name": name, "namespace": "xpupool-ml", "labels": labels}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **spec}


def test_a_finished_jobs_secret_goes_at_once_and_its_pods_after_the_retention(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    """A job that succeeds loses its Secret at once and keeps its pod for the sites file's
    retention (300 s by default: still there); a job that ends while the plane is down, and a
    Secret of a job the plane never had, are cleaned up by the restarted plane, its pods after
    the retention (here 2 s); another site's objects with the same job label are left alone."""
    kc, srv = plane
    r = user.put("/v1/secrets/token", json={"secret": "s3cret"}, timeout=60)  # the first seals
    assert r.status_code in (200, 201), r.text
    secrets = [{"name": "token", "env": "TOKEN"}]
    first = submit(user, image=DONE, secrets=secrets)
    state_is(srv, first, "succeeded")
    held = f"xp-{first}-1-secrets"
    until(lambda: secret_status(kc, held) == 404, "the finished job's Secret deleted", 30)
    assert len(pods(kc, first)) == 1  # kept for the retention: kubectl logs still answers

    ended = submit(user, image=SLOW, secrets=secrets)
    state_is(srv, ended, "running")
    srv.kill()  # kwok ends the pod while no plane watches

    def phase() -> str:
        found = pods(kc, ended)
        return str(found[0]["status"].get("phase")) if found else ""

    until(lambda: phase() == "Succeeded", "the slow pod done while the plane is down", 60)
    stray = labelled("Secret", "xp-987654-1-secrets", 987654, SITE, data={})
    other_secret = labelled("Secret", f"xp-{first}-other", first, "gpu-other", data={})
    spec = {"schedulerName": "no-such-scheduler", "containers": [{"name": "c", "image": SLEEP}]}
    other_pod = labelled("Pod", f"xp-{first}-other", first, "gpu-other", spec=spec)
    for obj, plural in ((stray, "secrets"), (other_secret, "secrets"), (other_pod, "pods")):
        r = kc.api.post(f"/api/v1/namespaces/xpupool-ml/{plural}", json=obj)
        assert r.status_code == 201, r.text
    sites = Path(srv.extra_args[srv.extra_args.index("--sites") + 1])
    before = sites.read_text()
    sites.write_text(before + "    finished_pods_retention_s: 2\n")
    try:
        srv.start(same_port=True)
        state_is(srv, ended, "succeeded")  # reconciled from its pod by the restarted plane
        until(
            lambda: secret_status(kc, f"xp-{ended}-1-secrets") == 404,
            "the Secret of the job that ended while the plane was down deleted",
            60,
        )
        until(lambda: secret_status(kc, stray["metadata"]["name"]) == 404, "the stray Secret", 60)
        until(lambda: not pods(kc, ended), "the pod of the job ended while down deleted", 60)
        until(
            lambda: [p["metadata"]["name"] for p in pods(kc, first)] == [f"xp-{first}-other"],
            "the first job's pod deleted after the retention, another site's pod left",
            60,
        )
        assert secret_status(kc, other_secret["metadata"]["name"]) == 200
    finally:
        sites.write_text(before)  # a later restart runs with the default retention again
        kc.api.delete(f"/api/v1/namespaces/xpupool-ml/pods/{other_pod['metadata']['name']}")
        kc.api.delete(f"/api/v1/namespaces/xpupool-ml/secrets/{other_secret['metadata']['name']}")


def test_a_nodes_changed_cards_labels_and_taints_reach_the_plane(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    """A Node of the site whose cards (HAMi's registration annotation), labels and taints change
    is registered again with them: the plane's book follows the cluster, as an agent's new
    inventory is followed (here nothing runs there, so nothing drains). Last in the module: the
    deleted Node stays in the plane's book, lost."""
    kc, srv = plane
    r = kc.api.post("/api/v1/nodes", json=kwok_node("kw-grow", cards=2))
    assert r.status_code == 201, r.text

    def cards() -> int:
        r = httpx.get(f"{srv.url}/v1/devices", headers=srv.headers())
        return sum(1 for d in r.json() if d["node"] == "kw-grow") if r.status_code == 200 else -1

    try:
        until(lambda: cards() == 2, "kw-grow's two cards", 30)
        grown = kwok_node("kw-grow", cards=4)["metadata"]
        patch = {
            "metadata": {
                "labels": {"zone": "b"},
                "annotations": {
                    "hami.io/node-nvidia-register": grown["annotations"][
                        "hami.io/node-nvidia-register"
                    ]
                },
            },
            "spec": {"taints": [{"key": "team", "value": "ml", "effect": "NoSchedule"}]},
        }
        r = kc.api.patch(
            "/api/v1/nodes/kw-grow",
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
        until(lambda: cards() == 4, "kw-grow's four cards", 30)

        def view() -> dict[str, Any]:
            return next(n for n in nodes(srv) if n["name"] == "kw-grow")

        until(lambda: view()["labels"].get("zone") == "b", "kw-grow's new label", 30)
        assert [(t["key"], t["value"], t["effect"]) for t in view()["taints"]] == [
            ("team", "ml", "NoSchedule")
        ], view()
        assert view()["status"] == "ready" and view()["schedulable"], view()
    finally:
        kc.api.delete("/api/v1/nodes/kw-grow")
