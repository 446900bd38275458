"""A service whose job names a site that runs services itself (a Kubernetes site, issue 49 part
4): the controller submits no replica job; it hands the site the whole set of its services with
the replicas its one scaling rule decides (the proxy's in-flight counts), takes the service's
ready endpoints from the site, says the site's problem in the service's reason, and a deleted
service is no longer wanted. On a real plane and SQLite store; the site is a stub that records
what it is told (the Kubernetes side is tests/e2e/k8s/test_plane_services_e2e.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from server_kit import Server, node_body, tenant
from test_server_services import Counts, keeper, show

from xpupool.engine.host import HostedNode
from xpupool.model.allocation import Allocation
from xpupool.server.plane.records import HeldJob, NodeRecord
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_sites import ServiceKey, ServiceWant

SITE = "kube"


class StubSite:
    """A site that runs services (``service_sites.ServiceSite``) and owns no node of the plane's
    book (the nodes of ``site=kube`` are an agent's here, so the verdict has somewhere to fit)."""

    kind = "stub"

    def __init__(self) -> None:
        self.wants: list[dict[ServiceKey, ServiceWant]] = []
        self.endpoints: dict[ServiceKey, list[Endpoint]] = {}
        self.problems: dict[ServiceKey, str] = {}

    @property
    def name(self) -> str:
        return SITE

    def owns(self, record: NodeRecord) -> bool:
        return False

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        return iter(())

    def start(self, job: HeldJob) -> bool:
        raise AssertionError("no job of a service on this site is started")

    def stop(self, job: HeldJob) -> None:
        pass

    def adopt(self, jobs: Iterable[HeldJob]) -> None:
        pass

    def foreign(self) -> Mapping[str, Sequence[Allocation]]:
        return {}

    def want_services(self, wants: Mapping[ServiceKey, ServiceWant]) -> None:
        self.wants.append(dict(wants))

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        return self.endpoints.get((tenant, service), [])

    def problem(self, tenant: str, service: str) -> str:
        return self.problems.get((tenant, service), "")


def test_a_service_on_a_site_is_wanted_scaled_served_and_deleted(server: Server) -> None:
    site = StubSite()
    server.plane.sites.add(site)
    body = {**node_body("k1", runtime="podman"), "site": SITE}
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text
    a = tenant(server, "a")
    service: dict[str, Any] = {
        "name": "web",
        "port": 8000,
        "job": {"image": "srv:1", "spec": f"A100:1 site={SITE}"},
        "replicas": {"min": 1, "max": 3},
        "scaling": {"target_in_flight": 1, "window_s": 0},
    }
    r = server.client.post("/v1/services", json=service, headers=server.as_(a))
    assert r.status_code == 201, r.text
    counts = Counts()
    server.plane.service_traffic = counts  # type: ignore[assignment]
    controller = keeper(server)

    controller.reconcile()
    want = site.wants[-1][("a", "web")]
    assert (want.replicas, want.queue, want.spec.job.image, want.spec.port) == (
        1,
        "a",
        "srv:1",
        8000,
    )
    got = show(server, a)
    assert got["replicas"] == [], "no replica job for a service its site runs"
    assert got["state"] == "starting" and f"site {SITE}" in got["reason"]
    assert server.schedule() == 0  # nothing was submitted

    site.endpoints[("a", "web")] = [Endpoint(0, 0, "10.0.0.7", 8000)]
    controller.reconcile()
    got = show(server, a)
    assert (got["state"], got["ready"]) == ("ready", 1), got
    assert list(controller.ready("a", "web")) == [Endpoint(0, 0, "10.0.0.7", 8000)]

    counts.total = 3  # three requests in flight, one per replica aimed at: up to 3
    controller.reconcile()
    assert site.wants[-1][("a", "web")].replicas == 3
    got = show(server, a)
    assert got["desired"] == 3 and got["state"] == "degraded"
    assert any("scaled from 1 to 3" in e["reason"] for e in got["events"])

    changed = {**service, "readiness": {"path": "/healthz"}}  # not a new generation
    r = server.client.put("/v1/services/web", json=changed, headers=server.as_(a))
    assert r.status_code == 200, r.text
    controller.reconcile()
    assert site.wants[-1][("a", "web")].spec.readiness.path == "/healthz"

    site.problems[("a", "web")] = "job.secrets: not passed yet"
    controller.reconcile()
    got = show(server, a)
    assert got["state"] == "pending" and "not passed yet" in got["reason"]

    assert server.client.delete("/v1/services/web", headers=server.as_(a)).status_code == 204
    controller.reconcile()
    assert site.wants[-1] == {}
