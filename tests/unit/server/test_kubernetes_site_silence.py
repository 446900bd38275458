"""A Kubernetes site whose API server stops answering (issue 51, part 3), by the rule an agent
site follows (``server/site_health.py``): its nodes are heard while its watches are answered, so
once none has been for longer than ``lost_after_s`` its nodes are lost, the site is unreachable in
``GET /v1/sites`` and its scheduled job is ``unknown``; the server back, the site is reachable and
the job is no longer unknown. No job is requeued on the plane's word. The site talks real HTTP to
a small API server on 127.0.0.1 (``fake_apiserver.py``), stopped and started again on its port."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_apiserver import FakeApiServer, node_object
from server_kit import Server, heartbeat, job, node_body, submit, tenant

from xpupool.k8s.site.site import KubernetesSite
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.services.agents import mark_lost_nodes

pytestmark = pytest.mark.slow  # a site's threads against an HTTP server: seconds


def until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def sites(server: Server) -> dict[str, Any]:
    r = server.client.get("/v1/sites", headers=server.admin)
    assert r.status_code == 200, r.text
    return {s["name"]: s for s in r.json()}


def test_a_site_whose_api_server_is_silent_past_the_grace_is_unreachable_until_it_answers(
    server: Server, tmp_path: Path
) -> None:
    plane = server.plane
    body = node_body("a-0", count=2) | {"site": "lab"}  # an agent site: a pool of two sites
    assert server.client.post("/v1/agent/register", json=body, headers=server.admin).is_success
    api = FakeApiServer(tokens={"t"}).__enter__()
    api.add_node(node_object("n1"))
    kubeconfig = tmp_path / "kc.json"
    kubeconfig.write_text(api.kubeconfig("t"))
    site = KubernetesSite(KubernetesSiteConfig(name="gpu-a", kubeconfig=kubeconfig), resync_s=0)
    plane.sites.add(site)
    site.attach(plane)
    try:
        until(lambda: plane.node("n1") is not None, "n1 registered")
        a = tenant(server, "a")
        job_id = submit(server, a, "A100:1 site=gpu-a", image="busybox:1")["id"]
        server.schedule()
        assert job(server, job_id)["state"] == "scheduled"
        mark_lost_nodes(plane)
        assert sites(server)["gpu-a"]["reachable"] is True

        errors = [i.errors for i in site._informers]
        api.stop()  # the API server down
        until(
            lambda: all(i.errors > e for i, e in zip(site._informers, errors, strict=True)),
            "every watch of the site failing",
        )
        server.clock.advance(plane.lost_after_s + 1)
        heartbeat(server, "a-0")  # the agent site answers
        mark_lost_nodes(plane)
        shown = sites(server)
        assert shown["gpu-a"]["reachable"] is False, shown
        assert shown["lab"]["reachable"] is True
        got = job(server, job_id)
        assert got["state"] == "unknown", got
        assert any("site gpu-a unreachable" in e["reason"] for e in got["events"])

        server.clock.advance(20 * plane.lost_after_s)  # far past the lease: still not requeued
        heartbeat(server, "a-0")
        mark_lost_nodes(plane)
        assert job(server, job_id)["state"] == "unknown"

        api = FakeApiServer(tokens={"t"}, port=api.port).__enter__()  # back
        api.add_node(node_object("n1"))
        until(lambda: site.answering() is not None, "a watch of the site answered")
        heartbeat(server, "a-0")
        mark_lost_nodes(plane)
        assert sites(server)["gpu-a"]["reachable"] is True
        back = job(server, job_id)
        assert back["state"] != "unknown" and back["attempts"] <= 1, back
    finally:
        site.detach()
        api.stop()
