"""A Kubernetes site's failure cases on a real local control plane (issue 49, "Tests on a real
control plane"): the API server down for 30 s then back, an extender restart, and borrowing
then reclaim by preemption across two tenants. The plane runs with the chart's identity
(``plane_identity.py``: a ServiceAccount token, its RBAC and admission policies), as in
``test_plane_gated_e2e.py``, whose site this module starts again with two tenant namespaces.

Tenants ``ml`` and ``cv`` each have a queue of nominal two cards in cohort ``gpu``: the site's
four cards. Each test ends with its jobs cancelled and their pods gone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import ExtenderProcess, K8sCluster
from test_plane_gated_e2e import GATE, create, gated_site, gates, get, job_state, pod
from test_plane_site_e2e import SITE, SLEEP, job, pods, state_is

from xpupool.k8s.codec.allocation_audit import audit_allocations

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = pytest.mark.k8s

TENANTS = ("ml", "cv")
Site = tuple[K8sCluster, ServerProc, ExtenderProcess]
USERS: dict[str, httpx.Client] = {}  # each tenant's own client, while the module's site runs


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("plane-faults")
    with (
        gated_site(tmp, tuple(f"xpupool-{t}" for t in TENANTS)) as (kc, srv, ext),
        ExitStack() as clients,
        httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as admin,
    ):
        for tenant in TENANTS:
            USERS[tenant] = clients.enter_context(srv.tenant_client(tenant))
            quota = {"flavor": "nvidia", "resource": "devices", "nominal": 2}
            body = {"name": tenant, "tenant": tenant, "cohort": "gpu", "quotas": [quota]}
            admin.put(f"/v1/queues/{tenant}", json=body).raise_for_status()
        yield kc, srv, ext
        USERS.clear()


def submit(srv: ServerProc, tenant: str) -> int:
    """A job of ``tenant`` in its queue: one A100 of the site, running until deleted."""
    body = {"spec": f"A100:1 site={SITE}", "image": SLEEP, "queue": tenant}
    r = USERS[tenant].post("/v1/jobs", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def audit(kc: K8sCluster, job_ids: list[int]) -> Any:
    """The bound pods of ``job_ids`` against the cards of the site's Nodes."""
    bound = [p for j in job_ids for p in pods(kc, j) if p["spec"].get("nodeName")]
    return audit_allocations(kc.api.get("/api/v1/nodes").json()["items"], bound)


def placed(kc: K8sCluster, job_id: int) -> tuple[str, str, str]:
    """The one pod of ``job_id``: its name, uid and node."""
    (got,) = pods(kc, job_id)
    return got["metadata"]["name"], got["metadata"]["uid"], got["spec"].get("nodeName") or ""


def cancel(srv: ServerProc, job_ids: list[int]) -> None:
    for job_id in job_ids:
        r = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=srv.headers(), timeout=30)
        assert r.status_code == 200, r.text
    for job_id in job_ids:
        state_is(srv, job_id, "cancelled", timeout_s=90)


def test_the_api_server_down_for_30_s_fails_no_job_and_admission_resumes(site: Site) -> None:
    """kube-apiserver stopped for 30 s (etcd kept) while a job runs and another is submitted:
    no job fails or is run again, the one submitted meanwhile gets its pod once the API server
    is back, and a kubectl pod created after that is gated, admitted and placed."""
    kc, srv, _ = site
    running = submit(srv, "ml")
    state_is(srv, running, "running", timeout_s=120)  # the module's first: a loaded machine
    before = placed(kc, running)
    with kc.apiserver_down():
        down_at = time.monotonic()
        meanwhile = submit(srv, "ml")  # admitted by the plane; its pod waits for the server
        time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
        assert job(srv, running)["state"] == "running", job(srv, running)
        assert job(srv, meanwhile)["state"] in ("pending", "admitted", "scheduled")
    state_is(srv, meanwhile, "running", timeout_s=120)
    assert placed(kc, running) == before  # the same pod, never made again
    assert job(srv, running)["state"] == "running"
    assert job(srv, running)["attempts"] == 1 and job(srv, meanwhile)["attempts"] == 1
    assert gates(create(kc, pod("after-outage"))) == [GATE]
    gated = job_state(srv, "after-outage", "running", timeout_s=120)
    assert gates(get(kc, "after-outage")) == []
    assert not (found := audit(kc, [running, meanwhile])).over, found
    cancel(srv, [running, meanwhile, int(gated["id"])])


def test_an_extender_restart_keeps_the_pods_bound_and_counts_nothing_twice(site: Site) -> None:
    """The extender stopped while two jobs run: a third job's pod waits unbound; the extender
    back, it reads the bound pods again, binds the third, and no card is granted twice (the
    audit of the bound pods' annotations, and the extender's own count of charged pods)."""
    kc, srv, ext = site
    held = [submit(srv, "ml") for _ in range(2)]
    for job_id in held:
        state_is(srv, job_id, "running")
    before = [placed(kc, j) for j in held]
    ext.stop()
    try:
        late = submit(srv, "ml")
        until(lambda: pods(kc, late), "the third job's pod made", 60)
        time.sleep(2)  # kube-scheduler tries it and cannot reach the extender
        assert placed(kc, late)[2] == "", "bound while the extender was down"
        assert job(srv, late)["state"] != "running"
    finally:
        ext.start()
    state_is(srv, late, "running", timeout_s=120)
    assert [placed(kc, j) for j in held] == before  # still bound where they were
    found = audit(kc, [*held, late])
    assert found.pods == 3 and not found.over and not found.unreadable, found

    def charged() -> float:
        r = httpx.get(f"http://127.0.0.1:{ext.metrics_port}/metrics", timeout=10)
        line = next(x for x in r.text.splitlines() if x.startswith("xpupool_extender_pods_charged"))
        return float(line.split()[-1])

    until(lambda: charged() == 3.0, "the extender charging each bound pod once", 30)
    cancel(srv, [*held, late])


def test_borrowing_then_reclaim_preempts_the_borrowers_pod_and_records_who(site: Site) -> None:
    """Tenant ml borrows cv's idle quota (four jobs on the site's four cards); cv submits one:
    the plane reclaims by preemption, deletes one of ml's pods, records on that job which job
    preempted it, and starts cv's job only once the victim's pod is gone (no card granted
    twice). The victim waits in ml's queue, no pod of it left."""
    kc, srv, _ = site
    borrowers = [submit(srv, "ml") for _ in range(4)]
    for job_id in borrowers:
        state_is(srv, job_id, "running")
    lender = submit(srv, "cv")
    state_is(srv, lender, "running", timeout_s=120)
    why = f"preempted by job {lender}: queue cv reclaims the quota it lent"

    def preempted(job_id: int) -> bool:
        return any(why in e["reason"] for e in job(srv, job_id).get("events", []))

    victims = until(lambda: [j for j in borrowers if preempted(j)], "the preempted job's event", 30)
    assert len(victims) == 1, [job(srv, j) for j in victims]
    (victim,) = victims
    assert job(srv, victim)["state"] == "pending", job(srv, victim)
    until(lambda: not pods(kc, victim), "the victim's pod deleted", 60)
    found = audit(kc, [*borrowers, lender])
    assert found.pods == 4 and not found.over, found
    left = [j for j in borrowers if j != victim]
    assert all(job(srv, j)["state"] == "running" for j in left)
    cancel(srv, [*borrowers, lender])
