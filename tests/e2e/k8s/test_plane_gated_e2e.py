"""Kubectl users under the plane's queues (issue 49, part 3), on a real local control plane:
etcd + kube-apiserver + kube-scheduler with xpupool's extender + kwok, the chart's identity for
the plane (its RBAC and both admission policies applied for real: ``plane_identity.py``), and
``xpupool up --sites FILE`` running with that identity.

A pod created through the API in the tenant's namespace with the label ``xpupool.io/queue`` is
gated by the chart's MutatingAdmissionPolicy; the plane submits it as a job of the tenant through
its one submission path, admits it in its cycle, removes the gate (the ValidatingAdmissionPolicy
allows the plane nothing else), and kube-scheduler with the extender binds it on a kwok node. A
second one waits on the queue's quota while the first holds it, and is admitted once its user
deletes the first (which cancels the first's job). A pod that can never fit, and one with a bad
annotation, get a Warning Event with the plane's reason and stay gated, no job made. A restarted
plane knows its kubectl pods' jobs again and submits none twice; cancelling such a job through the
API deletes its pod.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
from plane_identity import plane_identity
from test_extender_gang_e2e import PODGROUP_CRD, wait_established
from test_plane_site_e2e import COMPLETE_STAGE, DONE, MANAGED, SITE, SLEEP, kwok_node, nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

from xpupool.k8s.informers.pod_groups import POD_GROUP_LABEL

pytestmark = pytest.mark.k8s

GATE = "xpupool.io/admission"
TENANT = "ml"
NAMESPACE = f"xpupool-{TENANT}"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


@contextmanager
def gated_site(
    tmp: Path, namespaces: Sequence[str] = (NAMESPACE,)
) -> Iterator[tuple[K8sCluster, ServerProc, ExtenderProcess]]:
    """The cluster (two kwok nodes of two A100s), the chart's identity and policies for the
    plane with a RoleBinding in each of ``namespaces``, and ``xpupool up`` managing the cluster
    as site :data:`SITE` with that identity (the extender's process too, for a test that
    restarts it)."""
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok", "helm", "kubectl"))
    port = free_port()
    extender = Extender(url_prefix=f"http://127.0.0.1:{port}", managed_resources=MANAGED)
    with K8sCluster(tmp / "cluster", extender=extender) as kc:
        bins = find_binaries(("kwok",))
        stages = tmp / "kwok-stages.yaml"
        stages.write_text(bins["kwok-stages"].read_text() + COMPLETE_STAGE)
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
            kubeconfig = plane_identity(kc, tmp, tenant_namespaces=tuple(namespaces))
            wait_for_the_gate(kc)
            sites = tmp / "sites.yaml"
            sites.write_text(f"sites:\n  - name: {SITE}\n    kubeconfig: {kubeconfig}\n")
            with ServerProc(tmp / "data", extra_args=("--sites", str(sites))) as srv:
                until(lambda: len(nodes(srv)) == 2, "the site's nodes in /v1/nodes", 60)
                yield kc, srv, ext
        finally:
            ext.stop()


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ServerProc]]:
    """:func:`gated_site`; tenant :data:`TENANT`'s queue holds one card (quota nominal 1, no
    borrowing)."""
    with gated_site(tmp_path_factory.mktemp("plane-gated")) as (kc, srv, _):
        with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
            admin.post("/v1/tenants", json={"name": TENANT}).raise_for_status()
            quota = {"flavor": "nvidia", "resource": "devices", "nominal": 1}
            body = {"name": TENANT, "tenant": TENANT, "quotas": [quota]}
            admin.put(f"/v1/queues/{TENANT}", json=body).raise_for_status()
        yield kc, srv


def wait_for_the_gate(kc: K8sCluster) -> None:
    """The MutatingAdmissionPolicy gates a labelled probe pod (its informer takes a moment after
    creation); the probes are deleted before the plane starts."""
    deadline = time.monotonic() + 30
    for n in range(1000):
        made = create(kc, pod(f"probe-{n}", queue="probe"))
        kc.api.delete(f"{PODS}/probe-{n}", params={"gracePeriodSeconds": "0"})
        if gates(made):
            return
        assert time.monotonic() < deadline, "the MutatingAdmissionPolicy never gated a pod"
        time.sleep(0.3)


def pod(
    name: str,
    *,
    queue: str = TENANT,
    gpus: int = 1,
    image: str = SLEEP,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"xpupool.io/queue": queue},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "xpupool-scheduler",
            "containers": [{"name": "main", "image": image, "resources": {"limits": limits}}],
        },
    }


def create(kc: K8sCluster, obj: dict[str, Any]) -> dict[str, Any]:
    r = kc.api.post(PODS, json=obj)
    assert r.status_code == 201, r.text
    return dict(r.json())


def get(kc: K8sCluster, name: str) -> dict[str, Any]:
    r = kc.api.get(f"{PODS}/{name}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def gates(obj: dict[str, Any]) -> list[str]:
    return [g["name"] for g in obj["spec"].get("schedulingGates") or []]


def job_of(srv: ServerProc, name: str) -> dict[str, Any] | None:
    """The plane's job standing for pod ``name`` (named ``pod NAMESPACE/NAME``), or None."""
    r = httpx.get(  # a loaded CI machine: the plane may take its time, not a failure
        f"{srv.url}/v1/jobs", headers=srv.headers(), params={"tenant": TENANT}, timeout=30
    )
    assert r.status_code == 200, r.text
    items = r.json()
    items = items["items"] if isinstance(items, dict) else items
    return next((j for j in items if j["name"] == f"pod {NAMESPACE}/{name}"), None)


def job_state(srv: ServerProc, name: str, *states: str, timeout_s: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        got = job_of(srv, name)
        return got if got is not None and got["state"] in states else None

    try:
        return dict(until(check, f"pod {name}'s job {'/'.join(states)}", timeout_s))
    except AssertionError:
        raise AssertionError(f"{job_of(srv, name)}\n{srv.log()[-4000:]}") from None


def events(kc: K8sCluster, name: str) -> list[dict[str, Any]]:
    r = kc.api.get(
        f"/api/v1/namespaces/{NAMESPACE}/events",
        params={"fieldSelector": f"involvedObject.name={name}"},
    )
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def test_a_kubectl_pod_is_gated_admitted_and_placed_and_a_second_waits_on_quota(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    kc, srv = plane
    assert gates(create(kc, pod("first"))) == [GATE]  # the chart's policy gates it
    job_state(srv, "first", "running")
    first = get(kc, "first")
    assert gates(first) == [], first["spec"]
    node = first["spec"]["nodeName"]  # bound by kube-scheduler through the extender
    allocated = first["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    assert f"GPU-{node}-" in allocated
    # the plane's books hold the cards the extender bound it to, whatever its placement was
    card = allocated.split(",")[0]
    job_id = (job_of(srv, "first") or {})["id"]

    def cards() -> list[tuple[str, str]]:
        r = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=30)
        held = r.json()["assignments"]
        return [(x["node"], d["uuid"]) for x in held for d in x["devices"]]

    until(lambda: cards() == [(node, card)], "the job's cards: the bound pod's", 30)
    # the plane's identity removed only its gate: labels and annotations are the user's
    assert first["metadata"]["labels"] == {"xpupool.io/queue": TENANT}

    assert gates(create(kc, pod("second", image=DONE))) == [GATE]
    waiting = job_state(srv, "second", "pending")
    until(
        lambda: "quota" in (job_of(srv, "second") or {}).get("reason", ""),
        "the second pod's job waiting on quota",
        30,
    )
    time.sleep(1)  # a cycle or more: it stays gated while the first holds the quota
    assert gates(get(kc, "second")) == [GATE], waiting

    # its user deletes the first: its job ends, the second is admitted, bound, run to the end
    kc.api.delete(f"{PODS}/first", params={"gracePeriodSeconds": "0"})
    job_state(srv, "first", "cancelled")
    done = job_state(srv, "second", "succeeded")
    assert done["exit_code"] == 0
    second = get(kc, "second")
    assert second["status"]["phase"] == "Succeeded" and second["spec"]["nodeName"]


def test_a_pod_that_can_never_fit_gets_an_event_and_stays_gated(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    kc, srv = plane
    create(kc, pod("too-big", gpus=8))  # two cards per node
    create(kc, pod("bad", annotations={"xpupool.io/request": "{not json"}))

    def said(name: str) -> str:
        return " | ".join(e["message"] for e in events(kc, name) if e["reason"] == "NotAdmitted")

    big = until(lambda: said("too-big"), "the never-fits Event", 30)
    assert "nothing in the pool can hold it, even empty" in big, big
    assert f"site {SITE}" in big, big
    bad = until(lambda: said("bad"), "the bad annotation's Event", 30)
    assert 'metadata.annotations["xpupool.io/request"]' in bad, bad
    assert (ev := events(kc, "bad")[0])["type"] == "Warning", ev
    for name in ("too-big", "bad"):
        assert gates(get(kc, name)) == [GATE]
        assert job_of(srv, name) is None  # refused: nothing admitted, nothing stored
    for name in ("too-big", "bad"):
        kc.api.delete(f"{PODS}/{name}", params={"gracePeriodSeconds": "0"})


def test_a_gated_pod_deleted_by_its_user_ends_its_job(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    """While the queue's card is held, a gated pod waits; its user deletes it: its job is
    cancelled, never admitted."""
    kc, srv = plane
    create(kc, pod("holder"))
    job_state(srv, "holder", "running")
    create(kc, pod("given-up"))
    job_state(srv, "given-up", "pending")
    kc.api.delete(f"{PODS}/given-up", params={"gracePeriodSeconds": "0"})
    job_state(srv, "given-up", "cancelled")
    kc.api.delete(f"{PODS}/holder", params={"gracePeriodSeconds": "0"})
    job_state(srv, "holder", "cancelled")


def test_a_restarted_plane_knows_its_kubectl_pods_and_submits_none_twice(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    """A crash while a kubectl pod runs and another waits gated on quota: the restarted plane
    finds both jobs by the stored pod uids (its watch lists both pods again), submits neither
    again, and still ends them when their users delete the pods."""
    kc, srv = plane
    create(kc, pod("kept"))
    job_state(srv, "kept", "running")
    create(kc, pod("queued"))
    job_state(srv, "queued", "pending")
    srv.kill()  # a crash: nothing flushed
    srv.start(same_port=True)
    until(lambda: len(nodes(srv)) == 2, "the site's nodes after the restart", 60)
    time.sleep(2)  # the site's watch lists the pods again; nothing must be submitted twice

    def named(name: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{srv.url}/v1/jobs", headers=srv.headers(), timeout=30)
        return [j for j in r.json() if j["name"] == f"pod {NAMESPACE}/{name}"]

    assert len(named("kept")) == 1 and len(named("queued")) == 1
    assert job_state(srv, "kept", "running")["attempts"] == 1
    assert gates(get(kc, "queued")) == [GATE]
    kc.api.delete(f"{PODS}/queued", params={"gracePeriodSeconds": "0"})
    job_state(srv, "queued", "cancelled")
    kc.api.delete(f"{PODS}/kept", params={"gracePeriodSeconds": "0"})
    job_state(srv, "kept", "cancelled")


def test_cancelling_a_kubectl_pods_job_deletes_the_pod(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    kc, srv = plane
    create(kc, pod("cancelled"))
    job_id = job_state(srv, "cancelled", "running")["id"]
    r = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=srv.headers(), timeout=30)
    assert r.status_code == 200, r.text
    job_state(srv, "cancelled", "cancelled")
    until(
        lambda: kc.api.get(f"{PODS}/cancelled").status_code == 404,
        "the cancelled job's pod deleted",
        30,
    )


def owned(name: str, group: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """A gated pod of PodGroup ``group`` whose controller is ``owner`` (a Job or a ReplicaSet),
    or of none."""
    obj = pod(name)
    obj["metadata"]["labels"][POD_GROUP_LABEL] = group
    if owner is not None:
        meta = owner["metadata"]
        ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True}
        obj["metadata"]["ownerReferences"] = [{**ref, "name": meta["name"], "uid": meta["uid"]}]
    return obj


def gang_job(srv: ServerProc, group: str) -> dict[str, Any] | None:
    r = httpx.get(f"{srv.url}/v1/jobs", headers=srv.headers(), timeout=30)
    assert r.status_code == 200, r.text
    return next((j for j in r.json() if j["name"] == f"pods {NAMESPACE}/{group}"), None)


def gang_state(srv: ServerProc, group: str, state: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = gang_job(srv, group)
        return found if found is not None and found["state"] == state else None

    try:
        return dict(until(check, f"PodGroup {group}'s gang job {state}", 90))
    except AssertionError:
        raise AssertionError(f"{gang_job(srv, group)}\n{srv.log()}") from None


def podgroup(kc: K8sCluster, name: str, min_member: int) -> None:
    body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup"}
    body |= {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"minMember": min_member}}
    kc.create(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/podgroups", body)


def test_one_owners_pods_of_a_podgroup_are_admitted_together_as_one_gang(
    plane: tuple[K8sCluster, ServerProc],
) -> None:
    """Two pods of one Job with a PodGroup of minMember 2: the first stays gated, no job made,
    until the second exists; then one gang job of two replicas is admitted, both gates go, the
    extender binds both, and they run to the end (kwok completes a Job's pods). Two pods of a
    ReplicaSet's gang running: its user deleting one cancels the gang, whose other pod the plane
    deletes. A pod of a PodGroup with no controller gets a NotAdmitted event."""
    kc, srv = plane
    r = kc.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=PODGROUP_CRD)
    assert r.status_code in (201, 409), r.text
    wait_established(kc, "podgroups.scheduling.x-k8s.io")
    podgroup(kc, "pair", 2)
    podgroup(kc, "duo", 2)
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": SLEEP}]}}
    body = {"metadata": {"name": "trainer"}, "spec": {"suspend": True, "template": template}}
    job_owner = kc.create(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", body)
    labels = {"app": "duo"}
    rs_spec = {"replicas": 0, "selector": {"matchLabels": labels}}  # no controller makes pods
    rs_spec["template"] = {
        "metadata": {"labels": labels},
        "spec": template["spec"] | {"restartPolicy": "Always"},
    }
    rs_owner = kc.create(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets",
        {"metadata": {"name": "duo"}, "spec": rs_spec},
    )
    with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as admin:
        quota = {"flavor": "nvidia", "resource": "devices", "nominal": 2}  # room for a pair
        queue = {"name": TENANT, "tenant": TENANT, "quotas": [quota]}
        admin.put(f"/v1/queues/{TENANT}", json=queue).raise_for_status()
        try:
            create(kc, owned("pair-0", "pair", job_owner))
            time.sleep(2)  # the plane's watch has it: a member alone is no job
            assert gang_job(srv, "pair") is None
            assert gates(get(kc, "pair-0")) == [GATE]
            create(kc, owned("pair-1", "pair", job_owner))
            done = gang_state(srv, "pair", "succeeded")
            assert done["request"].get("replicas") == 2 and done["request"].get("gang"), done
            assert done["attempts"] == 1 and done["exit_code"] == 0, done
            for name in ("pair-0", "pair-1"):
                got = get(kc, name)
                assert gates(got) == [] and got["spec"]["nodeName"], got["spec"]
                assert got["status"]["phase"] == "Succeeded", got["status"]

            create(kc, owned("duo-0", "duo", rs_owner))
            create(kc, owned("duo-1", "duo", rs_owner))
            gang_state(srv, "duo", "running")
            kc.api.delete(f"{PODS}/duo-0", params={"gracePeriodSeconds": "0"})
            gang_state(srv, "duo", "cancelled")
            until(
                lambda: kc.api.get(f"{PODS}/duo-1").status_code == 404,
                "the gang's other pod deleted by the plane",
                60,
            )

            create(kc, owned("orphan", "pair", None))

            def said() -> list[str]:
                return [e["message"] for e in events(kc, "orphan") if e["reason"] == "NotAdmitted"]

            (why,) = until(said, "the ownerless member's event", 30)
            assert "it has no controller" in why, why
            kc.api.delete(f"{PODS}/orphan", params={"gracePeriodSeconds": "0"})
        finally:
            quota["nominal"] = 1
            admin.put(f"/v1/queues/{TENANT}", json=queue).raise_for_status()
