"""A kubectl user's gated pod on a real plane (issue 49, part 3): the pod's watch events go
through ``k8s/site/gated.py`` into the one submission path. A bad annotation, a queue that is not
the tenant's, and a request nothing in the site can hold each give the Event task the site's
worker posts, with the API's words, and store nothing; a pod in a namespace that is no tenant's is
left alone. A good pod becomes a pending job of the namespace's tenant, which a restarted plane's
site knows again, and which its deletion cancels."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, node, row_counts, tenant
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.gated import GATE, GatedPods, GatedTask
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.schemas.agent_protocol import ReplicaReport
from xpupool.server.storage.site_pods import site_pods

SITE = "default"  # the pool's agent nodes' site: a request naming it is judged against them


def pod(
    name: str,
    *,
    queue: str = "ml",
    namespace: str = "xpupool-ml",
    gpus: int = 1,
    **annotations: str,
) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {"xpupool.io/queue": queue},
            "annotations": annotations,
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "train:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            "schedulingGates": [{"name": GATE}],
        },
    }


def test_refused_pods_get_the_apis_reason_as_an_event_and_store_nothing(server: Server) -> None:
    tenant(server, "ml")
    node(server, "n1", runtime="docker")  # eight cards: a pod asking for nine never fits
    tasks: list[GatedTask] = []
    reports: list[tuple[str, ReplicaReport]] = []
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, tasks.append, lambda n, r: reports.append((n, r)))
    gated.bind(server.plane, None)  # no cluster: the watch's events are driven below
    before = row_counts(server)
    for obj in (
        pod("bad", **{"xpupool.io/request": "{not json"}),
        pod("other-queue", queue="nobody"),
        pod("never-fits", gpus=9),
        pod("not-a-tenants", namespace="default"),
    ):
        gated.on_pod(Event(EventType.ADDED, "k", obj["metadata"]["uid"], obj))
    said = {t.name: t.message for t in tasks}
    assert [t.kind for t in tasks] == ["event"] * 3
    assert set(said) == {"bad", "other-queue", "never-fits"}  # the default namespace: not seen
    assert 'metadata.annotations["xpupool.io/request"]' in said["bad"]
    assert "queue" in said["other-queue"] and "nobody" in said["other-queue"]
    assert "nothing in the pool can hold it, even empty" in said["never-fits"]
    assert all(m.startswith(f"xpupool site {SITE}: not admitted: ") for m in said.values())
    assert row_counts(server) == before  # a refused pod changes nothing
    assert not reports and not gated.owns(1)
    # the same pod seen again (a resync) is not refused twice
    again = pod("bad", **{"xpupool.io/request": "{not json"})
    gated.on_pod(Event(EventType.MODIFIED, "k", "uid-bad", again))
    assert len(tasks) == 3


def test_a_good_pod_becomes_a_job_its_deletion_cancels_it_and_a_restart_knows_it(
    server: Server,
) -> None:
    tenant(server, "ml")
    node(server, "n1", runtime="docker")
    tasks: list[GatedTask] = []
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, tasks.append, lambda n, r: None)
    gated.bind(server.plane, None)
    obj = pod("good", gpus=2)
    gated.on_pod(Event(EventType.ADDED, "xpupool-ml/good", "uid-good", obj))
    assert not tasks
    (got,) = server.client.get("/v1/jobs", headers=server.admin).json()
    assert (got["name"], got["tenant"], got["queue"], got["state"]) == (
        "pod xpupool-ml/good",
        "ml",
        "ml",
        "pending",
    )
    assert got["request"]["devices"]["count"] == 2 and got["image"] == "train:1"
    assert gated.owns(got["id"])
    later = GatedPods(config, tasks.append, lambda n, r: None)  # a restarted plane's site
    later.bind(server.plane, None)
    assert later.owns(got["id"])
    gated.on_pod(Event(EventType.DELETED, "xpupool-ml/good", "uid-good", obj))
    after = server.client.get(f"/v1/jobs/{got['id']}", headers=server.admin).json()
    assert after["state"] == "cancelled", after
    # the pod gone and its job final: the pair is forgotten, its row too
    assert not gated.owns(got["id"]) and row_counts(server)["site_pods"] == 0
    again = GatedPods(config, tasks.append, lambda n, r: None)
    again.bind(server.plane, None)
    assert not again.owns(got["id"])


def test_a_pod_jobs_row_goes_with_the_job_when_retention_deletes_it(server: Server) -> None:
    """A pod job that ended while its pod stays (cancelled through the API): the row names a pod
    the plane has nothing more to do with, and goes when retention deletes the job."""
    tenant(server, "ml")
    node(server, "n1", runtime="docker")
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, lambda t: None, lambda n, r: None)
    gated.bind(server.plane, None)
    obj = pod("kept", gpus=1)
    gated.on_pod(Event(EventType.ADDED, "xpupool-ml/kept", "uid-kept", obj))
    (got,) = server.client.get("/v1/jobs", headers=server.admin).json()
    r = server.client.post(f"/v1/jobs/{got['id']}/cancel", headers=server.admin)
    assert r.status_code == 200, r.text
    assert row_counts(server)["site_pods"] == 1
    server.plane.forget_jobs([got["id"]])
    assert row_counts(server)["site_pods"] == 0


def test_a_pod_job_is_stored_with_its_row_or_not_at_all(server: Server) -> None:
    """The job and the row naming its pod are one transaction: a job stored without its row
    would be taken, after a restart, for one the plane makes pods for. A row that cannot be
    written (here a stale row on the job's id) leaves no job behind."""
    tenant(server, "ml")
    node(server, "n1", runtime="docker")
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, lambda t: None, lambda n, r: None)
    gated.bind(server.plane, None)
    with server.plane.db.begin() as conn:
        conn.execute(
            insert(site_pods).values(
                job_id=server.plane.next_job_id, site=SITE, namespace="x", name="y", uid="z"
            )
        )
    before = row_counts(server)
    obj = pod("torn", gpus=1)
    with pytest.raises(IntegrityError):
        gated.on_pod(Event(EventType.ADDED, "xpupool-ml/torn", "uid-torn", obj))
    assert row_counts(server) == before
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


def test_a_pod_deleted_while_the_plane_was_down_cancels_its_job_once_listed(server: Server) -> None:
    """No DELETED event comes for a pod deleted while the plane was down: the restarted site's
    first full list is what says it is gone. A pod still there keeps its job."""
    tenant(server, "ml")
    node(server, "n1", runtime="docker")
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, lambda t: None, lambda n, r: None)
    gated.bind(server.plane, None)
    for name in ("gone", "kept"):
        gated.on_pod(Event(EventType.ADDED, f"xpupool-ml/{name}", f"uid-{name}", pod(name)))
    ids = {j["name"]: j["id"] for j in server.client.get("/v1/jobs", headers=server.admin).json()}
    later = GatedPods(config, lambda t: None, lambda n, r: None)  # the plane restarted
    later.bind(server.plane, None)
    later.reap_missing(lambda: {"uid-kept"})  # what the watch listed
    states = {
        j["name"]: j["state"] for j in server.client.get("/v1/jobs", headers=server.admin).json()
    }
    assert states == {"pod xpupool-ml/gone": "cancelled", "pod xpupool-ml/kept": "pending"}
    assert not later.owns(ids["pod xpupool-ml/gone"]) and later.owns(ids["pod xpupool-ml/kept"])
    assert row_counts(server)["site_pods"] == 1


def test_one_owners_pods_of_a_group_are_one_gang_job_a_restart_knows_each_and_retention_ends_it(
    server: Server,
) -> None:
    """Two gated pods of one owner with xpupool's gang annotations (size 2): the first alone is
    no job; with the second, one gang job of two replicas, whose rows name each pod by replica,
    read again by a restarted plane's site; of two later pods of the group, the one of another
    owner than the first is refused with an Event; retention removes every row of the gang."""
    tenant(server, "ml")
    node(server, "n1", runtime="docker")
    tasks: list[GatedTask] = []
    config = KubernetesSiteConfig(name=SITE, in_cluster=True)
    gated = GatedPods(config, tasks.append, lambda n, r: None)
    gated.bind(server.plane, None)
    gang = {"xpupool.io/gang": "pair", "xpupool.io/gang-size": "2"}

    def member(name: str, owner: str = "job-1") -> Any:
        obj = pod(name, **gang)
        ref = {"kind": "Job", "name": "trainer", "uid": owner, "controller": True}
        obj["metadata"]["ownerReferences"] = [ref]
        return obj

    for name in ("w-1", "w-0"):
        gated.on_pod(Event(EventType.ADDED, f"xpupool-ml/{name}", f"uid-{name}", member(name)))
        if name == "w-1":
            assert server.client.get("/v1/jobs", headers=server.admin).json() == []
    (got,) = server.client.get("/v1/jobs", headers=server.admin).json()
    assert got["name"] == "pods xpupool-ml/pair"
    assert got["request"]["replicas"] == 2 and got["request"]["gang"], got["request"]
    assert not tasks
    later = GatedPods(config, tasks.append, lambda n, r: None)  # a restarted plane's site
    later.bind(server.plane, None)
    assert later.job_of_uid("uid-w-0") == (got["id"], 0)  # replicas in the pods' name order
    assert later.job_of_uid("uid-w-1") == (got["id"], 1)
    # later pods of the group start a new gang, of one owner again
    gated.on_pod(Event(EventType.ADDED, "xpupool-ml/x", "uid-x", member("x", owner="job-2")))
    assert not tasks
    gated.on_pod(Event(EventType.ADDED, "xpupool-ml/y", "uid-y", member("y", owner="job-3")))
    (refused,) = tasks
    assert refused.kind == "event" and "a gang is one owner's pods" in refused.message
    r = server.client.post(f"/v1/jobs/{got['id']}/cancel", headers=server.admin)
    assert r.status_code == 200, r.text
    assert row_counts(server)["site_pods"] == 1 and row_counts(server)["site_gang_pods"] == 1
    server.plane.forget_jobs([got["id"]])
    assert row_counts(server)["site_pods"] == 0 and row_counts(server)["site_gang_pods"] == 0
