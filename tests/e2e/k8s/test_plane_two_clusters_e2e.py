"""Two Kubernetes clusters behind one plane (issue 51): two real control planes on 127.0.0.1, each
its own etcd, kube-apiserver, kube-scheduler with xpupool's extender and kwok, named in one sites
file; ``GET /v1/sites`` lists both as ``kubernetes`` sites, and a job naming a site gets its pod in
that cluster and in no other. Adding the second cluster is configuration only."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import K8sCluster, require_binaries
from kwok_site import kwok_site
from test_plane_site_e2e import SLEEP, pods, state_is

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = pytest.mark.k8s

SITES = ("gpu-a", "gpu-b")
Fleet = tuple[dict[str, K8sCluster], ServerProc]


def sites(srv: ServerProc) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/sites", headers=srv.headers(), timeout=30)
    assert r.status_code == 200, r.text
    return {s["name"]: s for s in r.json()}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok"))
    tmp = tmp_path_factory.mktemp("two-clusters")
    with ExitStack() as stack:
        clusters = {
            name: stack.enter_context(kwok_site(tmp, name, (f"{name}-0",)))[0] for name in SITES
        }
        text = "sites:\n" + "".join(
            f"  - name: {name}\n    kubeconfig: {kc.kubeconfig}\n    create_namespaces: true\n"
            for name, kc in clusters.items()
        )
        (tmp / "sites.yaml").write_text(text)
        srv = stack.enter_context(
            ServerProc(tmp / "data", extra_args=("--sites", str(tmp / "sites.yaml")))
        )
        until(lambda: all(s in sites(srv) for s in SITES), "both sites' nodes", 90)
        yield clusters, srv


def test_both_clusters_are_sites_of_the_one_plane(fleet: Fleet) -> None:
    _, srv = fleet
    shown = sites(srv)
    for name in SITES:
        assert shown[name]["kind"] == "kubernetes", shown[name]
        assert shown[name]["nodes"] == 1 and shown[name]["devices"] == 2, shown[name]
        assert shown[name]["reachable"] is True


def test_a_job_naming_a_site_runs_in_that_cluster_only(fleet: Fleet) -> None:
    clusters, srv = fleet
    with srv.tenant_client("ml") as user:
        for name, other in (("gpu-b", "gpu-a"), ("gpu-a", "gpu-b")):
            body = {"spec": f"A100:1 site={name}", "image": SLEEP}
            r = user.post("/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            job_id = int(r.json()["id"])
            got = state_is(srv, job_id, "running", timeout_s=120)
            assert [a["node"] for a in got["assignments"]] == [f"{name}-0"]
            (pod,) = pods(clusters[name], job_id)
            assert pod["spec"].get("nodeName") == f"{name}-0"
            assert pods(clusters[other], job_id) == []
            assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
            state_is(srv, job_id, "cancelled", timeout_s=90)
