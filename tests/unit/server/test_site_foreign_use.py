"""Pods on a Kubernetes site's nodes that are no job of the plane's, counted as use (issue 49,
"foreign use"): recorded pod objects go through the site's watch consumer
(``k8s/site/foreign.py``) into a real plane, without a cluster. A pod another scheduler bound
holds its cards in the plane's engine: a job that needs them waits with a reason naming the pod,
no tenant's quota counts them, an engine rebuild keeps them, and they come free (and the job
runs) when the pod ends. The plane's own pods, pods on another site's node and pods whose cards
no annotation names count nothing; a pod bound to cards the plane gave a job waits to be counted
until the job gives them back."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from lightkube.core.selector import build_selector
from server_kit import FakeClock, Server, job, node, open_server, queue_used, submit, tenant
from sqlalchemy import select

from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.gated import GATE
from xpupool.k8s.site.labelled_pods import SitePod, site_pod, with_label, without_label
from xpupool.k8s.site.pods import ATTEMPT, JOB, REPLICA, pod_name
from xpupool.k8s.site.pods import SITE as PLANE_SITE
from xpupool.k8s.site.site import KubernetesSite, read_node
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.app import create_app
from xpupool.server.schemas.agent_protocol import Heartbeat, ReplicaReport, ReplicaState
from xpupool.server.services import agents, fleet
from xpupool.server.sites import AgentPoolSite, Sites
from xpupool.server.storage.jobs import allocations as t_allocs

# Nodes as HAMi's device plugin registers them: the k8s unit tests' recorded objects
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
from hami_objects import hami_node

SITE = "kube"


def bound_pod(
    name: str,
    node: str,
    cards: list[str],
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    annotate: bool = True,
    namespace: str = "other",
) -> dict[str, Any]:
    """A pod bound to ``node`` holding ``cards`` whole, as HAMi's scheduler (or xpupool's
    extender) annotates it; ``annotate`` False: the same pod with only its resource limit."""
    allocated = "".join(f"{u},NVIDIA,81920,100:" for u in cards) + ";"
    annotations = (
        {
            "hami.io/vgpu-node": node,
            "hami.io/vgpu-devices-allocated": allocated,
            "hami.io/bind-phase": "success",
        }
        if annotate
        else {}
    )
    limits = {"nvidia.com/gpu": str(len(cards))}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "x:1", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


def seen(site: KubernetesSite, obj: dict[str, Any], kind: EventType = EventType.ADDED) -> None:
    """What the site's watches hand their consumers: a pod with the site's label goes to the
    pod watch's (``labelled_pods.py``), any other, bound and not finished, to the bound pods'
    watch's (which the API server's selection tells of a pod that finished as gone)."""
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    if meta["labels"].get(PLANE_SITE) == SITE:
        site._on_site_pods([Event(kind, key, meta["uid"], site_pod(obj))])
        return
    if kind is not EventType.DELETED and obj["status"]["phase"] in ("Succeeded", "Failed"):
        kind = EventType.DELETED
    site.foreign_pods.on_pod(Event(kind, key, meta["uid"], obj))


def listed(pods: list[dict[str, Any]]) -> list[Event[SitePod]]:
    """``pods`` as the site's pod watch hands its consumer a first list."""
    return [
        Event(
            EventType.ADDED,
            f"{o['metadata']['namespace']}/{o['metadata']['name']}",
            o["metadata"]["uid"],
            site_pod(o),
        )
        for o in pods
    ]


@pytest.fixture
def kube(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Server, KubernetesSite]]:
    """A plane with the agent pool and a Kubernetes site (not attached: no cluster) whose node
    k1 (two A100s, HAMi's registration) the site's node watch registered."""
    site = KubernetesSite(KubernetesSiteConfig(name=SITE, in_cluster=True))
    plane, token = open_server(tmp_path, clock, sites=Sites([AgentPoolSite(), site]))
    assert token is not None
    with TestClient(create_app(plane, background=False)) as client:
        srv = Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
        k1 = read_node(hami_node("k1", 2), SITE).node
        assert k1 is not None
        fleet.register_many(plane, [k1], source=site.source)
        site.foreign_pods.bind(plane)
        site._plane = plane  # what attach sets, without the watches (no cluster here)
        yield srv, site
    plane.db.dispose()


def test_a_pod_not_of_the_planes_holds_its_cards_until_it_ends(
    kube: tuple[Server, KubernetesSite],
) -> None:
    srv, site = kube
    a = tenant(srv, "a")
    used_before = queue_used(srv, "a")
    other = bound_pod("other", "k1", ["GPU-k1-0"])
    seen(site, other)
    both = submit(srv, a, f"A100:2 site={SITE}", image="train:1")
    srv.schedule()
    waiting = job(srv, both["id"])
    assert waiting["state"] == "pending"
    assert "cards held outside the plane's queues: pod other/other on k1" in waiting["reason"]
    assert queue_used(srv, "a") == used_before  # nobody's quota
    assert {h: [d.uuid for x in al for d in x.devices] for h, al in site.foreign().items()} == {
        "pod other/other": ["GPU-k1-0"]
    }
    # an engine rebuild (a node registered, a failed write) keeps the pod's cards held
    with srv.plane.locked():
        srv.plane.rebuild_engine()
    srv.schedule()
    assert job(srv, both["id"])["state"] == "pending"
    # a status change with the same cards changes nothing; the pod ending gives them back
    seen(site, {**other, "status": {"phase": "Running", "podIP": "10.0.0.9"}}, EventType.MODIFIED)
    seen(site, {**other, "status": {"phase": "Succeeded"}}, EventType.MODIFIED)
    assert site.foreign() == {}
    srv.schedule()
    placed = job(srv, both["id"])
    assert placed["state"] != "pending", placed["reason"]
    cards = {d["uuid"] for x in placed["assignments"] for d in x["devices"]}
    assert cards == {"GPU-k1-0", "GPU-k1-1"}


def test_what_a_site_does_not_count(kube: tuple[Server, KubernetesSite]) -> None:
    srv, site = kube
    node(srv, "a1", count=2)  # an agent node: another site's
    a = tenant(srv, "a")
    one = submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"]
    srv.schedule()
    assert srv.plane.count_run(one, 1, lambda _: "pods made") is not None  # the site's worker
    ((_, placed),) = cards_of(srv, one)
    labels = {
        "xpupool.io/job": str(one),
        "xpupool.io/replica": "0",
        "xpupool.io/attempt": "1",
        "xpupool.io/plane-site": SITE,
    }
    mine = bound_pod(f"xp-{one}-0-1", "k1", [placed], labels=labels, namespace="xpupool-a")
    seen(site, mine)  # the plane's own pod: its job counts it
    seen(site, bound_pod("agents", "a1", ["a1-gpu0"]))
    seen(site, bound_pod("plugin-only", "k1", ["GPU-k1-0"], annotate=False))
    seen(site, bound_pod("hostile", "k1", ["GPU-k9-0"]))  # a card not of the node
    assert site.foreign() == {} and srv.plane.foreign_use.applied == {}
    free = "GPU-k1-1" if placed == "GPU-k1-0" else "GPU-k1-0"
    # labelled as the plane's, but of a run it does not hold, or of another plane: counted
    fake = {**labels, "xpupool.io/attempt": "2"}
    theirs = {**labels, "xpupool.io/plane-site": "elsewhere"}
    seen(site, bound_pod(f"xp-{one}-0-2", "k1", [free], labels=fake, namespace="xpupool-a"))
    seen(site, bound_pod(f"xp-{one}-0-1", "k1", [free], labels=theirs, namespace="theirs"))
    held = [f"pod xpupool-a/xp-{one}-0-2", f"pod theirs/xp-{one}-0-1"]
    assert sorted(site.foreign()) == sorted(held)
    assert list(srv.plane.foreign_use.applied) == [(SITE, held[0])]
    assert srv.plane.foreign_use.waiting == {(SITE, held[1])}  # the same card: once
    assert cards_of(srv, one) == [("k1", placed)]  # neither moved the job


def test_a_lists_labelled_pods_are_counted_as_one_by_one_with_one_read_of_the_plane(
    kube: tuple[Server, KubernetesSite], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted plane's pod watch lists every pod with the site's label at once (10,000 of
    them): each asked the plane for its job's run, a take of the plane's lock each, and the
    bound pods' watch listed them all again. The list's jobs' runs are now read once, for the
    plane's own pods and for the use of those that are not its own, and what is counted is
    what the pods one by one would count."""
    srv, site = kube
    a = tenant(srv, "a")
    one = submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"]
    srv.schedule()
    assert srv.plane.count_run(one, 1, lambda _: "pods made") is not None
    ((_, placed),) = cards_of(srv, one)
    free = "GPU-k1-1" if placed == "GPU-k1-0" else "GPU-k1-0"
    labels = {
        "xpupool.io/job": str(one),
        "xpupool.io/replica": "0",
        "xpupool.io/attempt": "1",
        "xpupool.io/plane-site": SITE,
    }
    pods = [
        bound_pod(f"xp-{one}-0-1", "k1", [placed], labels=labels, namespace="xpupool-a"),
        bound_pod("bad-label", "k1", [free], labels={**labels, "xpupool.io/job": "x"}),
        bound_pod(f"xp-{one}-0-2", "k1", [free], labels={**labels, "xpupool.io/attempt": "2"}),
    ]
    asked: list[object] = []
    one_run, many_runs = srv.plane.held_run, srv.plane.held_runs
    monkeypatch.setattr(srv.plane, "held_run", lambda j: asked.append(j) or one_run(j))
    monkeypatch.setattr(
        srv.plane, "held_runs", lambda js: asked.append(set(js)) or many_runs(set(js))
    )
    site._on_site_pods(listed(pods))
    assert asked == [{one}], asked  # one read, of the one job the pods name well
    # the plane's own pod is its job's; the other two on k1's free card are counted, once
    assert sorted(site.foreign()) == ["pod other/bad-label", f"pod other/xp-{one}-0-2"]
    assert cards_of(srv, one) == [("k1", placed)]
    # the bound pods' watch no longer selects them: listed once, not twice
    assert build_selector(without_label(SITE)) == f"{PLANE_SITE} notin ({SITE})"
    assert build_selector(with_label(SITE)) == f"{PLANE_SITE}={SITE}"


def test_a_pod_whose_label_moves_it_between_the_two_watches_stays_counted(
    kube: tuple[Server, KubernetesSite],
) -> None:
    """A pod relabelled into (or out of) the site's label leaves one watch's selection and
    enters the other's: the two tell it on their own threads, in either order, and its cards
    stay counted whichever comes first; it holds nothing once the watch that has it says so."""
    srv, site = kube
    plain = bound_pod("moving", "k1", ["GPU-k1-0"])
    marked = bound_pod("moving", "k1", ["GPU-k1-0"], labels={PLANE_SITE: SITE})
    held = {"pod other/moving": ["GPU-k1-0"]}

    def book() -> dict[str, list[str]]:
        return {h: [d.uuid for x in al for d in x.devices] for h, al in site.foreign().items()}

    seen(site, plain)  # bound, without the label: the bound pods' watch
    seen(site, marked)  # labelled: the pod watch tells of it first...
    seen(site, plain, EventType.DELETED)  # ...then the bound pods' watch of it leaving
    assert book() == held and list(srv.plane.foreign_use.applied) == [(SITE, "pod other/moving")]
    seen(site, plain)  # and back, the bound pods' watch first this time
    seen(site, marked, EventType.DELETED)
    assert book() == held
    seen(site, {**plain, "status": {"phase": "Succeeded"}}, EventType.MODIFIED)
    assert book() == {} and srv.plane.foreign_use.applied == {}


def test_a_pod_on_cards_a_job_holds_is_counted_once_the_job_gives_them_back(
    kube: tuple[Server, KubernetesSite],
) -> None:
    srv, site = kube
    a = tenant(srv, "a")
    both = submit(srv, a, f"A100:2 site={SITE}", image="train:1")
    srv.schedule()
    assert job(srv, both["id"])["state"] != "pending"
    seen(site, bound_pod("late", "k1", ["GPU-k1-1"]))  # bound by another scheduler meanwhile
    assert srv.plane.foreign_use.waiting == {(SITE, "pod other/late")}
    r = srv.client.post(f"/v1/jobs/{both['id']}/cancel", headers=srv.as_(a))
    assert r.status_code == 200, r.text
    # the job's pods are gone: the site's report of it, and the job ends
    agents.heartbeat(
        srv.plane,
        Heartbeat(
            node="k1",
            replicas=[ReplicaReport(job_id=both["id"], replica=0, state=ReplicaState.STOPPED)],
        ),
    )
    assert job(srv, both["id"])["state"] == "cancelled"
    assert srv.plane.foreign_use.waiting == set()
    assert (SITE, "pod other/late") in srv.plane.foreign_use.applied
    two = submit(srv, a, f"A100:2 site={SITE}", image="train:1")
    srv.schedule()
    assert "pod other/late on k1" in job(srv, two["id"])["reason"]


def gated_pod(name: str, namespace: str = "xpupool-a") -> dict[str, Any]:
    """A kubectl user's pod under queue ``a``, gated, asking for one card."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {"xpupool.io/queue": "a"},
            "annotations": {},
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "schedulingGates": [{"name": GATE}],
        },
        "status": {"phase": "Pending"},
    }


def cards_of(srv: Server, job_id: int) -> list[tuple[str, str]]:
    return [(x["node"], d["uuid"]) for x in job(srv, job_id)["assignments"] for d in x["devices"]]


def test_a_kubectl_users_pod_bound_to_other_cards_moves_its_jobs_allocation_there(
    kube: tuple[Server, KubernetesSite],
) -> None:
    """The plane admits a gated pod by removing its gate; the extender binds it where it
    picks. Bound to the card the plane did not place it on, the job's allocation follows (event,
    stored row), the placement's card comes free; a pod bound to a card another job holds in
    the plane's books leaves its job where it was, with an event."""
    srv, site = kube
    tenant(srv, "a")
    site.gated.bind(srv.plane, None)  # no cluster: the watches' events are driven below
    gated = gated_pod("train")
    meta = gated["metadata"]
    site.gated.on_pod(Event(EventType.ADDED, "xpupool-a/train", meta["uid"], gated))
    assert site.gated.job_of_uid(meta["uid"]) is not None
    (job_id,) = srv.plane.queued
    srv.schedule()
    ((_, placed),) = cards_of(srv, job_id)
    other = "GPU-k1-1" if placed == "GPU-k1-0" else "GPU-k1-0"
    assert srv.plane.count_run(job_id, 1, lambda _: "the gate removed") is not None
    bound = bound_pod("train", "k1", [other], labels=meta["labels"], namespace="xpupool-a")
    bound["metadata"]["uid"] = meta["uid"]  # the same pod, bound by the extender
    seen(site, bound)
    assert cards_of(srv, job_id) == [("k1", other)]
    reasons = [e["reason"] for e in job(srv, job_id)["events"]]
    assert any(f"bound to {other} on k1" in r and "re-addressed" in r for r in reasons), reasons
    assert site.foreign() == {}  # its job counts it, once
    with srv.plane.db.connect() as conn:
        row = conn.execute(select(t_allocs.c.data).where(t_allocs.c.job_id == job_id)).one()
    assert [d["uuid"] for d in row.data["devices"]] == [other]
    # the placement's card is free now: a job of one card gets it, and none is left
    a = tenant(srv, "b")
    next_job = submit(srv, a, f"A100:1 site={SITE}", image="x:1")
    srv.schedule()
    assert cards_of(srv, next_job["id"]) == [("k1", placed)]
    # bound again, to the card the other job holds: nothing changes but an event
    again = bound_pod("train", "k1", [placed], labels=meta["labels"], namespace="xpupool-a")
    again["metadata"]["uid"] = meta["uid"]
    seen(site, again, EventType.MODIFIED)
    assert cards_of(srv, job_id) == [("k1", other)]
    reasons = [e["reason"] for e in job(srv, job_id)["events"]]
    assert any("which the plane's books hold for other work" in r for r in reasons), reasons


def _replica_pod(job_id: int, replica: int, card: str) -> dict[str, Any]:
    """The plane's own pod of ``job_id``'s ``replica`` (first run, tenant a) bound to ``card``."""
    labels = {JOB: str(job_id), REPLICA: str(replica), ATTEMPT: "1", PLANE_SITE: SITE}
    return bound_pod(
        pod_name(job_id, replica, 1), "k1", [card], labels=labels, namespace="xpupool-a"
    )


def test_a_gangs_pods_bound_to_each_others_cards_move_the_books_together(
    kube: tuple[Server, KubernetesSite],
) -> None:
    """A gang's pods carry no card constraint (the extender binds the group where it picks), so
    its pods may be bound to each other's cards: replica 0 on the card the plane placed replica
    1 on, and the other way. Each alone is held in the books by its sibling; once both are seen
    the books follow them together, with an event on the job, no card is counted twice and none
    is said to be held for other work. Seen failing before the fix: each re-address was refused
    alone and the books kept the placement for ever (the CI's gang e2e timed out on it)."""
    srv, site = kube
    a = tenant(srv, "a")
    job_id = submit(srv, a, f"A100:1 replicas=2 gang site={SITE}", image="train:1")["id"]
    srv.schedule()
    placed = {x["replica"]: x["devices"][0]["uuid"] for x in job(srv, job_id)["assignments"]}
    assert sorted(placed.values()) == ["GPU-k1-0", "GPU-k1-1"], placed
    assert srv.plane.count_run(job_id, 1, lambda _: "the pods made") is not None
    seen(site, _replica_pod(job_id, 0, placed[1]))
    # replica 0 alone: its card is replica 1's still, so the books wait for replica 1
    assert {
        x["replica"]: x["devices"][0]["uuid"] for x in job(srv, job_id)["assignments"]
    } == placed
    seen(site, _replica_pod(job_id, 1, placed[0]))
    swapped = {x["replica"]: x["devices"][0]["uuid"] for x in job(srv, job_id)["assignments"]}
    assert swapped == {0: placed[1], 1: placed[0]}
    reasons = [e["reason"] for e in job(srv, job_id)["events"]]
    assert sum("re-addressed" in r for r in reasons) == 2, reasons
    assert not any("for other work" in r for r in reasons), reasons
    with srv.plane.db.connect() as conn:
        rows = conn.execute(select(t_allocs.c.data).where(t_allocs.c.job_id == job_id)).all()
    stored = {r.data["replica"]: r.data["devices"][0]["uuid"] for r in rows}
    assert stored == swapped
    # both cards held once: a third job of one card waits
    b = tenant(srv, "b")
    waits = submit(srv, b, f"A100:1 site={SITE}", image="x:1")
    srv.schedule()
    assert job(srv, waits["id"])["state"] == "pending"


def test_a_pod_with_the_sites_label_and_no_job_label_is_counted_without_a_warning(
    kube: tuple[Server, KubernetesSite], caplog: pytest.LogCaptureFixture
) -> None:
    """A service's pods (its Deployment's) wear the site's label but no job label: the pod watch
    selects them and counts their cards as the bound pods' watch counted them, saying nothing
    of it; a job label the plane did not write is said in the log."""
    _srv, site = kube
    served = bound_pod("svc-abc", "k1", ["GPU-k1-0"], labels={PLANE_SITE: SITE, "x": "y"})
    forged = bound_pod(
        "forged", "k1", ["GPU-k1-1"], labels={PLANE_SITE: SITE, "xpupool.io/job": "x"}
    )
    with caplog.at_level(logging.WARNING):
        seen(site, served)
    assert "no pod of the plane's" not in caplog.text
    with caplog.at_level(logging.WARNING):
        seen(site, forged)
    assert "pod other/forged has the site's label but is no pod of the plane's" in caplog.text
    assert sorted(site.foreign()) == ["pod other/forged", "pod other/svc-abc"]


def test_a_lists_own_pods_are_checked_against_their_placement_in_one_read(
    kube: tuple[Server, KubernetesSite], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's first list hands every pod of the plane's at once, nearly all on the cards
    their jobs were placed on; each took a read of the plane (its lock) to find that out, 10,000
    at a restart holding 10,000 pods. The list is checked in one read now, and a gang whose pods
    the list shows bound to each other's cards still moves its books together."""
    srv, site = kube
    a = tenant(srv, "a")
    job_id = submit(srv, a, f"A100:1 replicas=2 gang site={SITE}", image="train:1")["id"]
    srv.schedule()
    placed = {x["replica"]: x["devices"][0]["uuid"] for x in job(srv, job_id)["assignments"]}
    assert srv.plane.count_run(job_id, 1, lambda _: "the pods made") is not None

    def replicas(cards: dict[int, str]) -> list[Event[SitePod]]:
        return listed([_replica_pod(job_id, r, card) for r, card in cards.items()])

    reads = 0
    read = srv.plane.read

    def counted(fn: Any) -> Any:
        nonlocal reads
        reads += 1
        return read(fn)

    monkeypatch.setattr(srv.plane, "read", counted)
    site._on_site_pods(replicas(placed))
    on_placement = reads
    reads = 0
    site._on_site_pods(replicas({0: placed[1], 1: placed[0]}))
    assert (on_placement, reads) == (1, 1)  # every pod's cards checked in one read
    swapped = {x["replica"]: x["devices"][0]["uuid"] for x in job(srv, job_id)["assignments"]}
    assert swapped == {0: placed[1], 1: placed[0]}
    assert site.foreign() == {}
