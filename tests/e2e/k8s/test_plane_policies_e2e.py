"""The chart's admission policies for the control plane, as ``helm template`` renders them,
applied to a real kube-apiserver (1.36: MutatingAdmissionPolicy is GA there,
``admissionregistration.k8s.io/v1``, served without a feature gate or runtime-config):

- the MutatingAdmissionPolicy gates a pod labelled ``xpupool.io/queue`` in a tenant namespace
  with ``xpupool.io/admission``, and leaves alone an unlabelled pod, a labelled pod outside the
  tenant namespaces and a pod the plane itself creates;
- the ValidatingAdmissionPolicy lets the plane's identity (impersonated by the admin) remove that
  gate and nothing else: a patch of labels, annotations, tolerations, node selector, images or of
  another gate is refused, and so is a second removal.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster import K8sCluster, require_binaries
from plane_identity import NAMESPACE, SERVER, USER, plane_identity

pytestmark = pytest.mark.k8s

GATE = "xpupool.io/admission"
QUEUE = "xpupool.io/queue"
TENANT = "team-a"
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}
PLANE = [
    ("Impersonate-User", USER),
    ("Impersonate-Group", "system:serviceaccounts"),
    ("Impersonate-Group", f"system:serviceaccounts:{NAMESPACE}"),
    ("Impersonate-Group", "system:authenticated"),
]
SERIAL = itertools.count()
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICY_PATHS = (
    f"{ADMISSION}/validatingadmissionpolicies",
    f"{ADMISSION}/validatingadmissionpolicybindings",
    f"{ADMISSION}/mutatingadmissionpolicies",
    f"{ADMISSION}/mutatingadmissionpolicybindings",
)


def suffix(path: str) -> str:
    """The name ending of the chart's object at ``path``."""
    return "pod-updates" if "validating" in path else "admission-gate"


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    """The chart's identity for the plane (plane_identity.py: its RBAC and policies applied for
    real); returns once the mutating policy gates a probe pod (the policies' informers take a
    moment after creation)."""
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(scheduler=False) as cluster:
        cluster.create("/api/v1/namespaces", {"metadata": {"name": "elsewhere"}})
        workdir = tmp_path_factory.mktemp("plane")
        plane_identity(cluster, workdir, tenant_namespaces=("team-a", "team-b"))
        kinds = {
            path.rsplit("/", 1)[-1]
            for path in POLICY_PATHS
            if cluster.api.get(f"{path}/{SERVER}-{suffix(path)}").status_code == 200
        }
        assert len(kinds) == len(POLICY_PATHS), kinds
        deadline = time.monotonic() + 30
        n = 0
        while not gates(create_pod(cluster, TENANT, f"probe-{n}", queue="q")):
            n += 1
            assert time.monotonic() < deadline, "the MutatingAdmissionPolicy never gated a pod"
            time.sleep(0.3)
        # and once the validating one refuses the plane a label change on it (each policy is
        # taken up by its own informer: the mutating one in force says nothing of the other;
        # the module's cases failed together once on a loaded machine, the plane's patches let
        # through)
        probe = f"probe-{n}"
        while (
            patch(cluster, probe, {"metadata": {"labels": {QUEUE: "x"}}}, MERGE).status_code != 403
        ):
            assert time.monotonic() < deadline, "the ValidatingAdmissionPolicy never refused"
            cluster.api.patch(  # undone by the admin, so the next try is a change again
                f"/api/v1/namespaces/{TENANT}/pods/{probe}",
                json={"metadata": {"labels": {QUEUE: "q"}}},
                headers=MERGE,
            )
            time.sleep(0.3)
        yield cluster


def pod(name: str, *, queue: str | None = None, gates: tuple[str, ...] = ()) -> dict[str, Any]:
    labels = {QUEUE: queue} if queue is not None else {}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "train:1"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def create_pod(
    kc: K8sCluster,
    namespace: str,
    name: str,
    *,
    queue: str | None = None,
    gates: tuple[str, ...] = (),
    as_plane: bool = False,
) -> dict[str, Any]:
    r = kc.api.post(
        f"/api/v1/namespaces/{namespace}/pods",
        json=pod(name, queue=queue, gates=gates),
        headers=PLANE if as_plane else None,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def gates(obj: dict[str, Any]) -> list[str]:
    return [g["name"] for g in obj["spec"].get("schedulingGates") or []]


# -- the gate ---------------------------------------------------------------------------------


def test_a_labelled_pod_in_a_tenant_namespace_is_gated(kc: K8sCluster) -> None:
    assert gates(create_pod(kc, TENANT, "labelled", queue="research")) == [GATE]
    # A gate of its own is kept beside xpupool's.
    got = create_pod(kc, TENANT, "own-gate", queue="research", gates=("example.com/wait",))
    assert sorted(gates(got)) == sorted(["example.com/wait", GATE])


def test_other_pods_are_left_alone(kc: K8sCluster) -> None:
    assert gates(create_pod(kc, TENANT, "unlabelled")) == []
    assert gates(create_pod(kc, "elsewhere", "not-a-tenant", queue="research")) == []
    assert gates(create_pod(kc, TENANT, "the-planes-own", queue="research", as_plane=True)) == []


# -- the plane's updates ----------------------------------------------------------------------


def patch(
    kc: K8sCluster, name: str, body: Any, headers: dict[str, str], *, as_plane: bool = True
) -> httpx.Response:
    h: list[tuple[str, str]] = [*headers.items(), *(PLANE if as_plane else [])]
    return kc.api.patch(f"/api/v1/namespaces/{TENANT}/pods/{name}", json=body, headers=h)


def refused(r: httpx.Response, words: str) -> None:
    assert r.status_code == 403, f"HTTP {r.status_code}: {r.text}"
    message = r.json()["message"]
    assert f"ValidatingAdmissionPolicy '{SERVER}-pod-updates'" in message, message
    assert words in message, message


def remove_gates(names: list[str]) -> list[dict[str, Any]]:
    return [
        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": n} for n in names]}
    ]


@pytest.mark.parametrize(
    ("body", "headers", "words"),
    [
        ({"metadata": {"labels": {QUEUE: "other"}}}, MERGE, "labels"),
        ({"metadata": {"annotations": {"x": "y"}}}, MERGE, "annotations"),
        ({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}, MERGE, "node selector"),
        (
            [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}],
            JSON_PATCH,
            "tolerations",
        ),
        (
            [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}],
            JSON_PATCH,
            "images",
        ),
        (  # the gate removed together with another change: all or nothing
            [
                *remove_gates([]),
                {"op": "add", "path": "/spec/nodeSelector", "value": {"zone": "a"}},
            ],
            JSON_PATCH,
            "node selector",
        ),
    ],
    ids=["labels", "annotations", "node-selector", "tolerations", "image", "gate-and-more"],
)
def test_the_plane_may_change_nothing_but_the_gate(
    kc: K8sCluster, body: Any, headers: dict[str, str], words: str
) -> None:
    name = f"held-{next(SERIAL)}"  # not the case's id: the message names the pod
    create_pod(kc, TENANT, name, queue="research")
    refused(patch(kc, name, body, headers), words)
    after = kc.api.get(f"/api/v1/namespaces/{TENANT}/pods/{name}").json()
    assert gates(after) == [GATE]  # a refused request changes nothing
    assert after["metadata"]["labels"] == {QUEUE: "research"}
    # The policy binds the plane only: the admin's same patch goes through.
    assert patch(kc, name, body, headers, as_plane=False).status_code == 200


def test_the_plane_removes_the_gate_once(kc: K8sCluster) -> None:
    create_pod(kc, TENANT, "admitted", queue="research")
    r = patch(kc, "admitted", remove_gates([]), JSON_PATCH)
    assert r.status_code == 200, r.text
    assert gates(r.json()) == []
    # Gone now: a second "removal" is an update that removes nothing, refused.
    refused(patch(kc, "admitted", remove_gates([]), JSON_PATCH), "only to remove")


def test_the_plane_keeps_other_gates(kc: K8sCluster) -> None:
    create_pod(kc, TENANT, "two-gates", queue="research", gates=("example.com/wait",))
    # Removing someone else's gate (ours kept) is refused; removing ours, keeping theirs, is not.
    refused(patch(kc, "two-gates", remove_gates([GATE]), JSON_PATCH), "only to remove")
    r = patch(kc, "two-gates", remove_gates(["example.com/wait"]), JSON_PATCH)
    assert r.status_code == 200, r.text
    assert gates(r.json()) == ["example.com/wait"]


def test_the_planes_own_token_acts_with_the_charts_rights(kc: K8sCluster) -> None:
    """With the ServiceAccount's token (what the chart's pod, or a test's local plane with
    plane_identity's kubeconfig, presents): it reads pods everywhere and Secrets in tenant
    namespaces only, creates pods only in tenant namespaces, and its patch of a gated pod is
    held to the gate's removal."""
    token = {"Authorization": f"Bearer {kc.token(NAMESPACE, SERVER)}"}
    assert kc.api.get("/api/v1/pods", headers=token).status_code == 200
    # Secrets only namespace by namespace: the site lists a run's Secrets where its pods are
    assert kc.api.get("/api/v1/secrets", headers=token).status_code == 403
    r = kc.api.get(f"/api/v1/namespaces/{TENANT}/secrets", headers=token)
    assert r.status_code == 200, r.text
    body = pod("by-token", queue="research")
    r = kc.api.post("/api/v1/namespaces/elsewhere/pods", json=body, headers=token)
    assert r.status_code == 403, r.text
    create_pod(kc, TENANT, "by-token", queue="research")
    path = f"/api/v1/namespaces/{TENANT}/pods/by-token"
    r = kc.api.patch(path, json={"metadata": {"labels": {"x": "y"}}}, headers={**MERGE, **token})
    assert r.status_code == 403, r.text
    r = kc.api.patch(path, json=remove_gates([]), headers={**JSON_PATCH, **token})
    assert r.status_code == 200, r.text
    assert gates(r.json()) == []
