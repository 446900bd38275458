"""A Kubernetes site on a real control plane whose kubeconfig is the admin's own secret in the
plane's store (issue 49), and whose API server goes down and comes back (issue 51, part 3).

The plane connects as a ServiceAccount (bound to cluster-admin) with a token bound to a Node
object: deleting that Node revokes the token, so a test can show that the site really moved to
the rotated credentials. The pool has a second site (a cluster file's node of site ``lab``), so
a silent Kubernetes site is judged unreachable; ``--lost-after 3`` keeps the wait short.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import K8sCluster, require_binaries, write_kubeconfig
from kwok_site import kwok_site
from test_plane_site_e2e import SITE, SLEEP, pods, state_is

from xpupool.k8s.codec.allocation_audit import audit_allocations

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = pytest.mark.k8s

SECRET = "gpu-a-kubeconfig"
NAMESPACE, ACCOUNT = "xpupool-system", "plane"
Plane = tuple[K8sCluster, ServerProc]
TOKENS: dict[str, str] = {}  # the plane's tokens: "old", "new"


def identity(kc: K8sCluster, bound_to: str, path: Path) -> str:
    """A kubeconfig at ``path`` for the plane's ServiceAccount with a token bound to Node
    ``bound_to`` (made here, with no cards: the site leaves it out); returns its text."""
    kc.create("/api/v1/nodes", {"metadata": {"name": bound_to}})
    TOKENS[bound_to.removeprefix("cred-")] = token = kc.token(NAMESPACE, ACCOUNT, node=bound_to)
    write_kubeconfig(path, kc.api_url, token=token)
    return path.read_text()


def set_secret(srv: ServerProc, value: str) -> None:
    r = httpx.put(
        f"{srv.url}/v1/secrets/{SECRET}", json={"secret": value}, headers=srv.headers(), timeout=30
    )
    assert r.status_code in (200, 201), r.text


def sites(srv: ServerProc) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/sites", headers=srv.headers(), timeout=30)
    assert r.status_code == 200, r.text
    return {s["name"]: s for s in r.json()}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    """The cluster (scheduler + extender + kwok, two kwok nodes of two A100s) and ``xpupool up``
    managing it as site :data:`SITE` with its kubeconfig in the secret store. A first start,
    before the secret is set, is refused naming the field."""
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok"))
    tmp = tmp_path_factory.mktemp("plane-secret")
    with kwok_site(tmp, "cluster", ("kw-0", "kw-1")) as (kc, _):
        kc.service_account(NAMESPACE, ACCOUNT)
        binding = {
            "metadata": {"name": "xpupool-plane-test"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        }
        kc.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        sites_file = tmp / "sites.yaml"
        sites_file.write_text(
            f"sites:\n  - name: {SITE}\n    kubeconfig_secret: {SECRET}\n"
            "    create_namespaces: true\n"
        )
        cluster = tmp / "cluster.yaml"  # a second site: the pool's own node
        cluster.write_text(
            "nodes:\n  - name: lab-0\n    site: lab\n    cpu: 8\n    memory: 32Gi\n"
            "    devices:\n"
            "      - {vendor: nvidia, model: NVIDIA Tesla T4, count: 1, memory: 15Gi}\n"
        )
        with_sites = ("--sites", str(sites_file), "--heartbeat", "1", "--lost-after", "3")
        srv = ServerProc(tmp / "data", cluster=cluster, extra_args=with_sites)
        with pytest.raises(RuntimeError) as refused:
            srv.start()
        assert f"sites[{SITE}].kubeconfig_secret" in str(refused.value), refused.value
        assert "no such secret of the admin's" in str(refused.value)
        srv.extra_args = ()
        with srv:  # the admin sets the site's secret, then starts with the sites file
            set_secret(srv, identity(kc, "cred-old", tmp / "old.kubeconfig"))
        srv.extra_args = with_sites
        with srv:
            until(lambda: len(sites(srv).get(SITE, {}).get("by_model", {})) > 0, "site", 60)
            yield kc, srv


def test_a_rotated_kubeconfig_secret_is_taken_without_a_restart(
    plane: Plane, tmp_path: Path
) -> None:
    """The admin sets the secret to a new token; once the plane says it switched, the old token
    is revoked (its Node deleted): a job submitted then gets its pod through the new one, bound
    and running, and the plane was never restarted."""
    kc, srv = plane
    pid = srv.proc.pid if srv.proc is not None else None
    set_secret(srv, identity(kc, "cred-new", tmp_path / "new.kubeconfig"))
    until(lambda: "credentials of secret" in srv.log(), "the site switched credentials", 60)
    assert kc.api.delete("/api/v1/nodes/cred-old").status_code == 200
    with httpx.Client(base_url=kc.api_url, verify=False, timeout=30) as api:
        old = {"Authorization": f"Bearer {TOKENS['old']}"}
        until(lambda: api.get("/api/v1/nodes", headers=old).status_code == 401, "revoked", 30)
    with srv.tenant_client("ml") as user:
        r = user.post("/v1/jobs", json={"spec": f"A100:1 site={SITE}", "image": SLEEP})
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        state_is(srv, job_id, "running", timeout_s=120)
        (pod,) = pods(kc, job_id)
        assert pod["spec"].get("nodeName") in ("kw-0", "kw-1")
        assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        state_is(srv, job_id, "cancelled", timeout_s=90)
    assert srv.proc is not None and srv.proc.pid == pid  # the same process throughout


def test_an_api_gang_becomes_one_group_the_extender_binds_whole(plane: Plane) -> None:
    """``A100:1 replicas=3 gang`` through the API: three pods of one group (xpupool's gang
    annotations), which the extender reserves as one and binds all together; running, each
    bound to a card of its own, and the plane's books follow the cards they got."""
    kc, srv = plane
    with srv.tenant_client("cv") as user:
        body = {"spec": f"A100:1 replicas=3 gang site={SITE}", "image": SLEEP}
        r = user.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        state_is(srv, job_id, "running", timeout_s=120)
        made = pods(kc, job_id)
        assert len(made) == 3 and all(p["spec"].get("nodeName") for p in made), made
        groups = {p["metadata"]["annotations"].get("xpupool.io/gang") for p in made}
        assert groups == {f"xp-{job_id}-1"}
        assert (
            f"gang xpupool-cv/xp-{job_id}-1: 3 places reserved"
            in (kc.dir.parent / "cluster-extender.log").read_text()
        )
        found = audit_allocations(kc.api.get("/api/v1/nodes").json()["items"], made)
        assert found.pods == 3 and not found.over and not found.unreadable, found
        bound = sorted((p["spec"]["nodeName"], _cards(p)) for p in made)
        until(lambda: _held(srv, job_id) == bound, "the plane's books on the bound cards", 30)
        assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        state_is(srv, job_id, "cancelled", timeout_s=90)


def _cards(pod: dict[str, Any]) -> tuple[str, ...]:
    """The card UUIDs xpupool's bind wrote on ``pod`` (HAMi's allocated annotation)."""
    text = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    devices = (d for container in text.split(";") for d in container.split(":") if d)
    return tuple(sorted(d.split(",")[0] for d in devices))


def _held(srv: ServerProc, job_id: int) -> list[tuple[str, tuple[str, ...]]]:
    got = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=30).json()
    return sorted(
        (a["node"], tuple(sorted(d["uuid"] for d in a["devices"]))) for a in got["assignments"]
    )


def test_a_site_whose_api_server_is_down_is_unreachable_until_it_answers(plane: Plane) -> None:
    """kube-apiserver stopped: past ``--lost-after`` the site is unreachable in ``/v1/sites``
    (the agent pool's site is not); started again, it is reachable once a watch is answered."""
    kc, srv = plane
    assert sites(srv)[SITE]["reachable"] is True
    with kc.apiserver_down():
        until(lambda: sites(srv)[SITE]["reachable"] is False, "the site unreachable", 60)
        assert sites(srv)["lab"]["reachable"] is True
        time.sleep(1)
    until(lambda: sites(srv)[SITE]["reachable"] is True, "the site reachable again", 120)
