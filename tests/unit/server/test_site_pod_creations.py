"""A Kubernetes site's worker makes many runs' pods at once (issue 49: 100 jobs a second;
``k8s/site/creations.py``): a real plane places the jobs, the site's worker talks real HTTP to a
small API server on 127.0.0.1 (``fake_apiserver.py``, which keeps the pods). Every job's pod is
made once, several at once; a creation refused for good fails its job alone, and one that met a
server error is made again, the others untouched. The reconciliation a restarted plane asks for
reads the pod watch's first list (no list of its own), and their reports reach the plane. The
pod watch's first list (a restarted plane's: every pod of its held jobs) applies its reports in
one write, not one per pod. A list whose continue token expired (410) is read again from its
start by the watch: it is not dropped."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_apiserver import FakeApiServer
from fastapi.testclient import TestClient
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from server_kit import FakeClock, Server, job, open_server, submit, tenant
from sqlalchemy import event

from xpupool.k8s.informers.kubeconfig import make_client
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site import finished as finished_module
from xpupool.k8s.site import site as site_module
from xpupool.k8s.site.gated import GATE
from xpupool.k8s.site.seen_pods import NotListedError
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


def config_of(api: FakeApiServer) -> SingleConfig:
    kubeconfig = KubeConfig.from_dict(json.loads(api.kubeconfig("t"))).get()
    assert kubeconfig is not None
    return kubeconfig


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
        site._client = make_client(config_of(api))
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


def running_pods(srv: Server, site: KubernetesSite, api: FakeApiServer) -> list[int]:
    """:data:`JOBS` jobs placed, their pods made by the site's worker (started here), then bound
    and running as kubelet would say; the plane not told yet. The jobs' ids."""
    a = tenant(srv, "a")
    ids = [submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"] for _ in range(JOBS)]
    srv.schedule()
    threading.Thread(target=site._work, daemon=True).start()
    until(lambda: len(api.pods) == JOBS, "every pod made")
    with api.lock:
        for pod in api.pods.values():
            pod["spec"]["nodeName"] = "k1"
            pod["status"] = {"phase": "Running"}
    return ids


def running_in_plane(srv: Server, ids: list[int]) -> bool:
    """Does the plane hold replica 0 of every job of ``ids`` running (its books, no request)?"""
    runs = [srv.plane.held_run(i) for i in ids]
    return all(run is not None and 0 in run.running for run in runs)


def watch_until_running(
    srv: Server, site: KubernetesSite, api: FakeApiServer, ids: list[int]
) -> None:
    """The site's pod watch started and stopped once the plane holds every job of ``ids``
    running: what its first list's batch did, the test then reads."""
    informer = site._pod_informer(config_of(api))
    informer.start()
    try:
        until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
    finally:
        informer.stop()


def test_a_restarts_reconciliation_reads_the_pod_watchs_list_and_lists_no_pods_itself(
    kube: tuple[Server, KubernetesSite, FakeApiServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted plane listed all its site's pods for its pod watch, then again for the
    reconciliation (and a third time for the bound pods' watch): the reconciliation reads the
    pod watch's first list instead, waiting for it (done again after the worker's backoff) when
    it comes first. A running job whose pod is gone is still a lost replica, and nothing is
    made again."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    first = site._pod_informer(config_of(api))  # the plane before its restart hears them run
    first.start()
    try:
        until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
    finally:
        first.stop()
    lost = ids[5]
    with api.lock:
        del api.pods[f"xp-{lost}-0-1"]  # deleted while no plane watched
    monkeypatch.setattr(site_module, "LISTED_WAIT_S", 0.05)
    later = KubernetesSite(site.config, resync_s=0)  # the restarted plane's site
    later._plane, later._client = srv.plane, make_client(config_of(api))
    threading.Thread(target=later._work, daemon=True).start()
    lists = api.pod_lists
    later._tasks.put(_Adopt(tuple(ids)))  # what a restarted plane's adopt queues, first
    until(lambda: later._failures >= 1, "the reconciliation tried before the watch listed")
    informer = later._pod_informer(config_of(api))
    informer.start()
    try:
        until(lambda: "is missing on site" in job(srv, lost)["reason"], "the lost replica")
    finally:
        informer.stop()
        later.detach()
    assert api.pod_lists == lists + 1, f"{api.pod_lists - lists} pod lists, the watch's one"
    assert set(api.pod_posts.values()) == {1}  # none made again


def test_a_restarts_first_list_follows_no_pod_log_until_its_jobs_are_reconciled(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A restarted plane's first list started a log follower for each running pod (a thread
    and a request each, up to the limit) while the list was still being read, holding back the
    reconciliation a restart waits on: the followers start once the held jobs are reconciled,
    one for each running pod."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    watch_until_running(srv, site, api, ids)  # the plane before its restart
    said: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    handler = Said()
    caplog.set_level(logging.INFO, logger=site_module.__name__)
    logging.getLogger(site_module.__name__).addHandler(handler)
    later = KubernetesSite(site.config, resync_s=0)  # the restarted plane's site
    later._plane, later._client = srv.plane, make_client(config_of(api))
    followed: dict[str, bool] = {}  # pod -> were its jobs reconciled when it was followed

    def follow(key: str, _target: object) -> None:
        followed[key] = any("held jobs reconciled" in m for m in said)

    monkeypatch.setattr(later.logs, "follow", follow)
    later._tasks.put(_Adopt(tuple(ids)))
    informer = later._pod_informer(config_of(api))
    try:
        informer.start()
        threading.Thread(target=later._work, daemon=True).start()
        until(lambda: len(followed) == JOBS, "every running pod's log followed")
    finally:
        informer.stop()
        later.detach()
        logging.getLogger(site_module.__name__).removeHandler(handler)
    assert set(followed) == {f"xpupool-a/xp-{i}-0-1" for i in ids}
    assert all(followed.values()), followed


def test_the_pod_watchs_first_list_applies_its_reports_in_one_write(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """A restarted plane's pod watch lists every pod of its held jobs at once: a heartbeat per
    pod was a write per pod (10,000 of them after a restart at 10,000 pods)."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    commits = 0

    def counted(_conn: object) -> None:
        nonlocal commits
        commits += 1

    informer = site._pod_informer(config_of(api))
    event.listen(srv.plane.db, "commit", counted)
    try:
        informer.start()
        until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
    finally:
        informer.stop()
        event.remove(srv.plane.db, "commit", counted)
    assert commits == 1, f"{commits} writes for {JOBS} pods"
    assert {job(srv, i)["state"] for i in ids} == {"running"}


def test_the_pod_watchs_first_list_reads_the_plane_once_not_three_times_a_pod(
    kube: tuple[Server, KubernetesSite, FakeApiServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted plane's first list of 10,000 pods asked the plane for each pod's run three
    times (is it a stray, what does it report, whose log is it), each a take of the plane's lock
    that the scheduling pass and every request wanted too: the list's batch now reads its jobs'
    runs in one read, and the watch's thread takes no other."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    asked: list[tuple[str, object]] = []  # (thread, job or jobs) of each read off this thread
    one, many = srv.plane.held_run, srv.plane.held_runs

    def held_run(job_id: int) -> object:
        if threading.current_thread() is not threading.main_thread():
            asked.append(("held_run", job_id))
        return one(job_id)

    def held_runs(job_ids: Iterable[int]) -> object:
        job_ids = list(job_ids)
        asked.append(("held_runs", tuple(sorted(job_ids))))
        return many(job_ids)

    monkeypatch.setattr(srv.plane, "held_run", held_run)
    monkeypatch.setattr(srv.plane, "held_runs", held_runs)
    watch_until_running(srv, site, api, ids)
    assert asked == [("held_runs", tuple(sorted(ids)))], asked
    assert {job(srv, i)["state"] for i in ids} == {"running"}


def test_a_burst_of_the_pod_watchs_events_is_written_in_batches_not_one_each(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """Pods going Pending, bound, Running at 100 jobs a second: each watch event was a store write
    (a heartbeat) under the plane's lock, the watch's thread waiting on each. Events queued while
    a write holds the lock are now taken together: held here while the burst queues up, the
    burst is at most the write that was waiting plus one more."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    with api.lock:  # made Pending, seen so by the watch's first list
        for pod in api.pods.values():
            pod["spec"].pop("nodeName", None)
            pod["status"] = {"phase": "Pending"}
    informer = site._pod_informer(config_of(api))
    informer.start()
    try:
        until(lambda: informer.synced, "the pod watch's first list taken")
        with counting(srv) as commits:
            with srv.plane.locked():  # a write of the plane's in progress
                with api.lock:  # the burst: every pod bound and running, a version each
                    for pod in api.pods.values():
                        api.version += 1
                        pod["metadata"]["resourceVersion"] = str(api.version)
                        pod["spec"]["nodeName"] = "k1"
                        pod["status"] = {"phase": "Running"}
                    last = str(api.version)
                deadline = time.monotonic() + 10.0  # the watch's thread takes them off the wire
                while informer.version != last and time.monotonic() < deadline:
                    time.sleep(0.05)
            until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
    finally:
        informer.stop()
    assert commits[0] <= 2, f"{commits[0]} writes for {JOBS} pods' events"
    assert {job(srv, i)["state"] for i in ids} == {"running"}


def test_stopping_a_job_whose_pods_the_watch_holds_lists_no_pods(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """A stop listed the job's pods by label, a read of the API server per stop, for what the
    pod watch held already; it reads the watch's now, and lists only while the watch has not
    shown a pod of each of the run's replicas (made a moment ago)."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    informer = site._pod_informer(config_of(api))
    informer.start()
    try:
        until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
        lists = api.pod_lists
        site._delete(ids[0])
        assert api.pod_lists == lists, "a stop listed the pods the watch held"
        path = f"/api/v1/namespaces/xpupool-a/pods/xp-{ids[0]}-0-1"
        assert path in {p for _, p in api.seen}  # its pod's delete was sent
        site._pods.pop(f"xpupool-a/xp-{ids[1]}-0-1")  # as if the watch had not shown it yet
        site._delete(ids[1])
        assert api.pod_lists == lists + 1  # then the list, as before
    finally:
        informer.stop()


def test_a_pod_that_ends_its_job_in_a_batch_has_the_jobs_leftovers_looked_at(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """A pod whose end ends its job: the job's Secret and pods are looked at then (the job is
    finished). Taken in a batch, its report is applied with the batch's, after the pod was
    asked whether its job is still held (it was): nothing was looked at, the Secret stayed."""
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    watch_until_running(srv, site, api, ids)
    key = f"xpupool-a/xp-{ids[0]}-0-1"
    state = site._pods.get(key)
    assert state is not None
    with api.lock:
        api.pods[f"xp-{ids[0]}-0-1"]["status"] = {"phase": "Succeeded"}
    done = Event(EventType.MODIFIED, key, f"uid-xp-{ids[0]}-0-1", replace(state, phase="Succeeded"))
    site._on_pods([done])
    assert job(srv, ids[0])["state"] == "succeeded"
    until(lambda: site.finished.next_due() is not None, "the finished job's pods looked at", 20)


def test_the_pod_watch_lists_again_from_its_start_when_a_page_expires(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    srv, site, api = kube
    ids = running_pods(srv, site, api)
    api.expire_continues = 1
    informer = site._pod_informer(config_of(api))
    informer.list_chunk = 5  # 12 pods: three pages
    informer.start()
    try:
        until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
    finally:
        informer.stop()
    assert api.expired == 1
    assert informer.synced and sorted(informer.keys()) == sorted(
        f"xpupool-a/xp-{i}-0-1" for i in ids
    )


def test_the_sweep_of_every_job_reads_the_pod_watchs_pods_and_lists_none_itself(
    kube: tuple[Server, KubernetesSite, FakeApiServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The site looks for finished jobs' leftovers when it is attached and every resync: it
    listed every pod of the plane's there (10,000 after a large restart), a second read of what
    the pod watch lists, and a restart's reconciliation waited behind it. It reads the watch's
    pods now, waiting for its first list (done again after the worker's backoff when it comes
    first); Secrets are still listed, in pages."""
    srv, site, api = kube
    monkeypatch.setattr(finished_module, "LIST_CHUNK", 5)
    monkeypatch.setattr(site_module, "LISTED_WAIT_S", 0.05)
    running_pods(srv, site, api)
    with api.lock:  # a pod of a job the store does not have: finished
        pod = json.loads(json.dumps(next(iter(api.pods.values()))))
        pod["metadata"]["name"] = "xp-999999-0-1"
        pod["metadata"]["labels"]["xpupool.io/job"] = "999999"
        api.pods["xp-999999-0-1"] = pod
    with pytest.raises(NotListedError):  # no list yet: the worker tries again later
        site.finished.sweep(None)
    informer = site._pod_informer(config_of(api))
    informer.start()
    try:
        until(lambda: informer.synced, "the pod watch's first list")
        lists = api.pod_lists
        site.finished.sweep(None)
    finally:
        informer.stop()
    assert api.pod_lists == lists, f"{api.pod_lists - lists} pod lists by the sweep"
    assert site.finished.next_due() is not None  # the finished job's pods found
    assert 999999 in site.finished._due and len(site.finished._due) == 1


@contextlib.contextmanager
def counting(srv: Server) -> Iterator[list[int]]:
    """The plane's store's commits while inside: ``[n]``."""
    commits = [0]

    def counted(_conn: object) -> None:
        commits[0] += 1

    event.listen(srv.plane.db, "commit", counted)
    try:
        yield commits
    finally:
        event.remove(srv.plane.db, "commit", counted)


def test_the_pod_watchs_first_list_notes_its_waiting_pods_in_one_write(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """A restarted plane's pods that the cluster has not bound (the extender found no node)
    each noted the job's reason in a write of its own; a list's notes now go with its reports,
    a write per 500."""
    srv, site, api = kube
    a = tenant(srv, "a")
    ids = [submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"] for _ in range(JOBS)]
    srv.schedule()
    threading.Thread(target=site._work, daemon=True).start()
    until(lambda: len(api.pods) == JOBS, "every pod made")
    why = "0/2 nodes are available: 2 insufficient device memory"
    unbound = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
    with api.lock:
        for pod in api.pods.values():
            pod["status"] = {"phase": "Pending", "conditions": [unbound]}
    informer = site._pod_informer(config_of(api))
    with counting(srv) as commits:
        informer.start()
        try:
            until(lambda: informer.synced, "the pod watch's first list taken")
        finally:
            informer.stop()
    assert commits == [1], f"{commits[0]} writes for {JOBS} waiting pods"
    for i in ids:
        assert f"waits on site {SITE}: Unschedulable: {why}" in job(srv, i)["reason"]


def test_a_restarted_sites_list_of_kubectl_users_pods_reports_them_in_one_write(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """Gated pods the plane has jobs for, listed by a restarted plane's site: each one's
    report was a write of its own (a heartbeat each); now a write per 500."""
    srv, site, api = kube
    tenant(srv, "a")
    site._gated.bind(srv.plane, site._client)
    for i in range(JOBS):
        name = f"user-{i}"
        obj = gated_pod(name)
        with api.lock:
            api.pods[name] = obj
        site._gated.on_pod(Event(EventType.ADDED, f"xpupool-a/{name}", obj["metadata"]["uid"], obj))
    ids = [int(j["id"]) for j in srv.client.get("/v1/jobs", headers=srv.admin).json()]
    assert len(ids) == JOBS
    srv.schedule()
    for i in ids:  # the gates removed (what the site's worker does on admission)
        assert srv.plane.count_run(i, 1, lambda _: "the gate removed") is not None
    with api.lock:
        for obj in api.pods.values():
            obj["spec"].pop("schedulingGates")
            obj["spec"]["nodeName"] = "k1"
            obj["status"] = {"phase": "Running"}
    later = KubernetesSite(site.config, resync_s=0)  # the restarted plane's site
    later._plane = srv.plane
    with counting(srv) as commits:
        informer = later.gated.attach(srv.plane, make_client(config_of(api)), config_of(api))
        try:
            until(lambda: running_in_plane(srv, ids), "every job's replica running in the plane")
        finally:
            informer.stop()
    assert commits == [1], f"{commits[0]} writes for {JOBS} pods"


def test_new_kubectl_users_pods_taken_together_are_submitted_in_one_write(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """Gated pods that arrive together (a burst of a watch's events, or a list's): each was
    submitted in a store write of its own; now together, each still its own job whose row names
    its pod, and one pod's second event in the batch makes no second job."""
    srv, site, _ = kube
    tenant(srv, "a")
    site._gated.bind(srv.plane, site._client)
    objs = [gated_pod(f"user-{i}") for i in range(JOBS)]
    events = [
        Event(EventType.ADDED, f"xpupool-a/{o['metadata']['name']}", o["metadata"]["uid"], o)
        for o in objs
    ]
    again = objs[0] | {"metadata": {**objs[0]["metadata"], "resourceVersion": "2"}}
    events.append(Event(EventType.MODIFIED, events[0].key, events[0].uid, again))
    with counting(srv) as commits:
        site._gated.on_pods(events)
    assert commits == [1], f"{commits[0]} writes for {JOBS} new pods"
    found = srv.client.get("/v1/jobs", headers=srv.admin).json()
    assert sorted(j["name"] for j in found) == sorted(
        f"pod xpupool-a/user-{i}" for i in range(JOBS)
    )
    for j in found:
        name = str(j["name"]).rsplit("/", 1)[1]
        assert site._gated.job_of_uid(f"uid-{name}") == (int(j["id"]), 0)


def gated_pod(name: str) -> dict[str, Any]:
    """A kubectl user's pod in tenant a's namespace, in its queue, gated."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "xpupool-a",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"xpupool.io/queue": "a"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "schedulingGates": [{"name": GATE}],
        },
    }


def test_a_tenants_namespace_is_made_once_and_again_when_a_pod_create_finds_it_gone(
    kube: tuple[Server, KubernetesSite, FakeApiServer],
) -> None:
    """The tenant's namespace create was sent with every batch of runs and answered 409 (21 %
    of the worker's time in a profile of the benchmark): the site remembers the namespaces it
    made or found. One deleted since (a pod create answered 404) is made again, and the run's
    pods after it: its job does not fail."""
    srv, site, api = kube
    api.hold_until = 0  # one run a batch here: nothing to wait for
    a = tenant(srv, "a")
    threading.Thread(target=site._work, daemon=True).start()

    def one_batch() -> int:
        i = int(submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"])
        srv.schedule()
        until(lambda: f"xp-{i}-0-1" in api.pods, f"job {i}'s pod made")
        return i

    for _ in range(3):
        one_batch()
    assert api.namespace_posts == 1, f"{api.namespace_posts} creates of one namespace"
    api.delete_namespace("xpupool-a")
    again = one_batch()
    assert api.namespace_posts == 2
    assert api.pod_posts[f"xp-{again}-0-1"] == 2  # the 404, then made
    assert job(srv, again)["state"] == "scheduled"
