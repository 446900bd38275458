"""Sites (issue 44, part 5): the plane holds a registry of sites, today's agent pool is the first,
and a second implementation plugs in beside it as the Kubernetes site will (issue 49): its nodes
are listed and placed on, its start and stop are called, and its replicas' states come back
through the same heartbeat service as an agent's."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, Server, heartbeat, job, node, open_server, report, submit
from server_kit import tenant as make_tenant

from xpupool.engine.host import HostedNode
from xpupool.model.allocation import Allocation
from xpupool.model.device import Device, Node
from xpupool.model.errors import RequestError
from xpupool.server.app import create_app
from xpupool.server.plane import HeldJob, NodeRecord
from xpupool.server.services import fleet
from xpupool.server.sites import AgentPoolSite, Site, Sites
from xpupool.server.up import UpConfig, build_sites


class EdgeSite:
    """A second kind of site, as small as a test allows: its nodes are the ones its "watch"
    publishes through the plane's registration service, and it records what the plane asks of
    it. Nothing of the plane is mocked."""

    def __init__(self, name: str = "edge") -> None:
        self._name = name
        self.started: list[int] = []
        self.stopped: list[int] = []
        self.adopted: list[list[int]] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def kind(self) -> str:
        return "test"

    def owns(self, record: NodeRecord) -> bool:
        return record.source == f"site:{self._name}"

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        for rec in records:
            yield HostedNode(rec.node, not rec.cordoned, frozenset(rec.cordoned_devices))

    def start(self, job: HeldJob) -> bool:
        self.started.append(job.id)
        return True  # it pushes: the work may run from now on

    def stop(self, job: HeldJob) -> None:
        self.stopped.append(job.id)

    def adopt(self, jobs: Iterable[HeldJob]) -> None:
        self.adopted.append(sorted(j.id for j in jobs))

    def foreign(self) -> Mapping[str, Sequence[Allocation]]:
        return {}

    def publish(self, srv: Server) -> None:
        """What its watch of its nodes does: report them to the plane."""
        cards = tuple(
            Device(f"e1-gpu{i}", "nvidia", "NVIDIA A100-SXM4-80GB", 81920, index=i)
            for i in range(2)
        )
        node = Node("e1", 64_000, 1 << 19, cards, site=self._name)
        fleet.register_many(srv.plane, [node], source=f"site:{self._name}")


@pytest.fixture
def two_sites(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Server, EdgeSite]]:
    """A plane as ``xpupool up`` builds it with one more site than the agent pool."""
    edge = EdgeSite()
    sites = build_sites(UpConfig(data=tmp_path, sites=(edge,)))
    plane, token = open_server(tmp_path, clock, sites=sites)
    assert token is not None
    with TestClient(create_app(plane, background=False)) as client:
        srv = Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
        edge.publish(srv)
        yield srv, edge
    plane.db.dispose()


def test_up_builds_the_agent_pool_first_then_the_given_sites(tmp_path: Path) -> None:
    edge = EdgeSite()
    sites = build_sites(UpConfig(data=tmp_path, sites=(edge,)))
    assert [(s.name, s.kind) for s in sites] == [("agents", "agents"), ("edge", "test")]
    assert isinstance(edge, Site) and isinstance(sites["agents"], AgentPoolSite)
    with pytest.raises(RequestError, match="registered already"):
        Sites([AgentPoolSite(), EdgeSite(), EdgeSite()])


def test_a_second_site_is_listed_placed_on_started_and_stopped(
    two_sites: tuple[Server, EdgeSite],
) -> None:
    srv, edge = two_sites
    node(srv, "a1", count=2)  # an agent node, beside the edge site's
    listed = srv.client.get("/v1/nodes", headers=srv.admin).json()
    assert {(n["name"], n["site"], n["source"]) for n in listed} == {
        ("a1", "default", "agent"),
        ("e1", "edge", "site:edge"),
    }
    a = make_tenant(srv, "a")
    on_edge = submit(srv, a, "A100:2 site=edge")
    on_agents = submit(srv, a, "A100:2 site=default")
    srv.schedule()
    assert [x["node"] for x in job(srv, on_edge["id"])["assignments"]] == ["e1"]
    assert edge.started == [on_edge["id"]]  # the agent pool's job is not the edge site's
    # the agent node is handed its job, and only its job, through the agent pool's book
    assert [w["job_id"] for w in heartbeat(srv, "a1")["run"]] == [on_agents["id"]]
    r = srv.client.post(f"/v1/jobs/{on_edge['id']}/cancel", headers=srv.as_(a))
    assert r.status_code == 200, r.text
    assert edge.stopped == [on_edge["id"]]
    # the site reports its replicas' states as agents do: the job ends, its cards come free
    heartbeat(srv, "e1", [report(on_edge["id"], 0, "stopped")])
    assert job(srv, on_edge["id"])["state"] == "cancelled"
    assert not any(x.node == "e1" for j in srv.plane.held_jobs.values() for x in j.allocations)


def test_a_restarted_plane_hands_each_site_its_held_jobs(
    two_sites: tuple[Server, EdgeSite], clock: FakeClock
) -> None:
    srv, edge = two_sites
    assert edge.adopted == [[]]  # a fresh store: nothing held
    a = make_tenant(srv, "a")
    held = submit(srv, a, "A100:1 site=edge")
    srv.schedule()
    again = EdgeSite()
    srv.plane.db.dispose()
    plane, _ = open_server(srv.data, clock, sites=Sites([AgentPoolSite(), again]))
    try:
        assert again.adopted == [[held["id"]]]
    finally:
        plane.db.dispose()


def test_a_node_no_site_owns_is_refused_naming_it(server: Server) -> None:
    with pytest.raises(RequestError, match="no site of this plane owns the node"):
        fleet.register_many(server.plane, [Node("x1", 1000, 1024)], source="site:gone")


def test_a_job_across_two_sites_is_started_by_each_on_its_own_nodes(
    two_sites: tuple[Server, EdgeSite],
) -> None:
    srv, edge = two_sites
    node(srv, "a1", count=2)
    a = make_tenant(srv, "a")
    both = submit(srv, a, "A100:2 replicas=2 span-sites")
    srv.schedule()
    assert sorted(x["node"] for x in job(srv, both["id"])["assignments"]) == ["a1", "e1"]
    assert edge.started == [both["id"]]
    assert [w["job_id"] for w in heartbeat(srv, "a1")["run"]] == [both["id"]]
    assert heartbeat(srv, "e1")["run"] == []  # the agent pool hands out on its own nodes only


class ActiveEdgeSite(EdgeSite):
    """An edge site with threads of its own, as the Kubernetes site is: its nodes run images
    only, and ``xpupool up`` attaches it to the plane."""

    def __init__(self) -> None:
        super().__init__()
        self.plane: object = None

    def attach(self, plane: object) -> None:
        self.plane = plane

    def detach(self) -> None:
        self.plane = None


def test_a_job_without_an_image_goes_to_agent_sites_only(tmp_path: Path, clock: FakeClock) -> None:
    edge = ActiveEdgeSite()
    sites = build_sites(UpConfig(data=tmp_path, sites=(edge,)))
    assert sites.active() == [edge]
    plane, token = open_server(tmp_path, clock, sites=sites)
    assert token is not None
    with TestClient(create_app(plane, background=False)) as client:
        srv = Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
        edge.publish(srv)
        node(srv, "a1", count=2)
        a = make_tenant(srv, "a")
        body = {"spec": "A100:1 site=edge", "command": ["true"]}
        r = srv.client.post("/v1/jobs", json=body, headers=srv.as_(a))
        assert r.status_code == 422, r.text
        assert "site edge runs container images only" in r.text
        assert srv.client.get("/v1/jobs", headers=srv.as_(a)).json() == []  # nothing stored
        jobs = [submit(srv, a, "A100:1") for _ in range(3)]
        srv.schedule()
        placed = [[x["node"] for x in job(srv, j["id"])["assignments"]] for j in jobs]
        assert placed == [["a1"], ["a1"], []]  # the third waits: the edge site's cards idle
        assert job(srv, jobs[2]["id"])["request"]["site"] == ["!edge"]
    plane.db.dispose()


def test_a_pushing_sites_running_replica_starts_its_job_without_a_pid(
    two_sites: tuple[Server, EdgeSite],
) -> None:
    """A site's replica has no process id the plane could show (a pod): the job starts on its
    first running report, and its event does not say the process never started."""
    srv, _ = two_sites
    a = make_tenant(srv, "a")
    on_edge = submit(srv, a, "A100:1 site=edge")
    srv.schedule()
    heartbeat(srv, "e1", [report(on_edge["id"], 0, "running")])
    got = job(srv, on_edge["id"])
    assert got["state"] == "running"
    assert got["events"][-1]["reason"] == "started on e1", got["events"][-1]
