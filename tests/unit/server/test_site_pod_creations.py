"""A Kubernetes site's worker makes many runs' pods at once (issue 49: 100 jobs a second;
``k8s/site/creations.py``): a real plane places the jobs, the site's worker talks real HTTP to a
small API server on 127.0.0.1 (``fake_apiserver.py``, which keeps the pods). Every job's pod is
made once, several at once; a creation refused for good fails its job alone, and one that met a
server error is made again, the others untouched. The reconciliation a restarted plane asks for
lists the site's pods once for all its held jobs, not once per job, and their reports reach the
plane."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_apiserver import FakeApiServer
from fastapi.testclient import TestClient
from lightkube.config.kubeconfig import KubeConfig
from server_kit import FakeClock, Server, job, open_server, submit, tenant

from xpupool.k8s.informers.kubeconfig import make_client
from xpupool.k8s.site.site import KubernetesSite, _Adopt, read_node
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.app import create_app
from xpupool.server.services import fleet
from xpupool.server.sites import AgentPoolSite, Sites

# Nodes as HAMi's device plugin registers them: the k8s unit tests' recorded objects
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
from hami_objects import hami_node

pytestmark = pytest.mark.slow  # a site's worker against an HTTP server: seconds

SITE = "kube"
JOBS = 12


def until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def kube(
    tmp_path: Path, clock: FakeClock
) -> Iterator[tuple[Server, KubernetesSite, FakeApiServer]]:
    """A plane with a Kubernetes site of two nodes of eight A100s, whose worker (not yet
    started) acts on the API server."""
    config = KubernetesSiteConfig(name=SITE, in_cluster=True, create_namespaces=True)
    site = KubernetesSite(config, resync_s=0)
    plane, token = open_server(tmp_path, clock, sites=Sites([AgentPoolSite(), site]))
    assert token is not None
    with (
        FakeApiServer(tokens={"t"}, keep_pods=True, hold_until=2) as api,
        TestClient(create_app(plane, background=False)) as client,
    ):
        srv = Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
        for name in ("k1", "k2"):
            found = read_node(hami_node(name, 8), SITE).node
            assert found is not None
            fleet.register_many(plane, [found], source=site.source)
        site._plane = plane
        kubeconfig = KubeConfig.from_dict(json.loads(api.kubeconfig("t"))).get()
        assert kubeconfig is not None
        site._client = make_client(kubeconfig)
        yield srv, site, api
        site.detach()
    plane.db.dispose()


def test_many_jobs_pods_are_made_at_once_each_once_and_one_failure_fails_no_other(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    srv, site, api = kube
    a = tenant(srv, "a")
    ids = [submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"] for _ in range(JOBS)]
    srv.schedule()  # each placed job's start queued for the worker
    refused, erred = ids[3], ids[7]
    api.answers[f"xp-{refused}-0-1"] = [422]  # the server's word: the job fails
    api.answers[f"xp-{erred}-0-1"] = [500]  # passing: made again
    threading.Thread(target=site._work, daemon=True).start()
    made = {f"xp-{i}-0-1" for i in ids if i != refused}
    until(lambda: made <= set(api.pods), "every pod but the refused one made")
    until(lambda: job(srv, refused)["state"] == "failed", "the refused job failed")

    assert set(api.pods) == made
    asked = dict(api.pod_posts)
    assert asked.pop(f"xp-{erred}-0-1") == 2  # the 500, then made
    assert set(asked.values()) == {1}, asked  # nothing asked twice, so nothing made twice
    assert api.most_in_flight >= 2  # the runs' pods were made at once
    reason = job(srv, refused)["reason"]
    assert f"site {SITE}" in reason and "answered 422" in reason, reason
    assert {job(srv, i)["state"] for i in ids if i != refused} == {"scheduled"}


def test_reconciling_many_held_jobs_lists_the_sites_pods_once(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    srv, site, api = kube
    a = tenant(srv, "a")
    ids = [submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"] for _ in range(JOBS)]
    srv.schedule()
    threading.Thread(target=site._work, daemon=True).start()
    until(lambda: len(api.pods) == JOBS, "every pod made")
    for pod in api.pods.values():  # bound and running, as kubelet would say
        pod["spec"]["nodeName"] = "k1"
        pod["status"] = {"phase": "Running"}
    lists = api.pod_lists
    site._tasks.put(_Adopt(tuple(ids)))  # what a restarted plane's adopt queues
    until(lambda: all(job(srv, i)["state"] == "running" for i in ids), "every job running")
    assert api.pod_lists == lists + 1
    assert set(api.pod_posts.values()) == {1}  # none made again
