"""Pods on a Kubernetes site's nodes that are no job of the plane's, counted as use (issue 49,
"foreign use"): recorded pod objects go through the site's watch consumer
(``k8s/site/foreign.py``) into a real plane, without a cluster. A pod another scheduler bound
holds its cards in the plane's engine: a job that needs them waits with a reason naming the pod,
no tenant's quota counts them, an engine rebuild keeps them, and they come free (and the job
runs) when the pod ends. The plane's own pods, pods on another site's node and pods whose cards
no annotation names count nothing; a pod bound to cards the plane gave a job waits to be counted
until the job gives them back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, Server, job, node, open_server, queue_used, submit, tenant

from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.site import KubernetesSite, read_node
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.app import create_app
from xpupool.server.schemas.agent_protocol import Heartbeat, ReplicaReport, ReplicaState
from xpupool.server.services import agents, fleet
from xpupool.server.sites import AgentPoolSite, Sites

SITE = "kube"
A100 = "NVIDIA A100-SXM4-80GB"


def hami_node(name: str, cards: int) -> dict[str, Any]:
    """A Node whose cards ``GPU-<name>-<i>`` HAMi's device plugin registered (HAMi v2.10.0)."""
    infos = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": A100,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(cards)
    ]
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {"hami.io/node-nvidia-register": json.dumps(infos)},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}},
    }


def bound_pod(
    name: str,
    node: str,
    cards: list[str],
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    annotate: bool = True,
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
            "namespace": "other",
            "uid": f"uid-{name}",
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
    """What the site's watch of bound pods hands its consumer."""
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    site.foreign_pods.on_pod(Event(kind, key, meta["uid"], obj))


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
    own = {"xpupool.io/job": "7", "xpupool.io/plane-site": SITE}
    another_planes = {"xpupool.io/job": "7", "xpupool.io/plane-site": "elsewhere"}
    seen(site, bound_pod("mine", "k1", ["GPU-k1-0"], labels=own))
    seen(site, bound_pod("agents", "a1", ["a1-gpu0"]))
    seen(site, bound_pod("plugin-only", "k1", ["GPU-k1-0"], annotate=False))
    seen(site, bound_pod("hostile", "k1", ["GPU-k9-0"]))  # a card not of the node
    assert site.foreign() == {} and srv.plane.foreign_use.applied == {}
    seen(site, bound_pod("theirs", "k1", ["GPU-k1-1"], labels=another_planes))
    assert list(site.foreign()) == ["pod other/theirs"]  # another plane's pod is foreign here
    a = tenant(srv, "a")
    one = submit(srv, a, f"A100:1 site={SITE}", image="train:1")
    srv.schedule()
    assert job(srv, one["id"])["state"] != "pending"


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
