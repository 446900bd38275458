"""The informer cut off from a real kube-apiserver while the cluster changes, then back after etcd
compacted its history: its watch gets a real ``410 Gone`` and it lists again, and the consumer sees
each change made while it was away exactly once (deletes included), as if it had never left.

How the 410 really happens: a TCP relay (``tcp_proxy.TcpProxy``) stands between the informer and the
apiserver; the test cuts it (the informer's watch ends, its reconnects fail and back off), changes
Nodes directly, compacts etcd to its current revision (``K8sCluster.compact_etcd``, what the
apiserver's own compactor does every 5 minutes), and lets the informer through again. It resumes
its watch from the last resourceVersion it saw, which etcd no longer has: with the apiserver's
watch cache off (``--watch-cache=false``), watches are served by etcd, which answers "required
revision has been compacted", and the apiserver sends that as a 410 Expired status.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import K8sCluster, require_binaries, write_kubeconfig

from tcp_proxy import TcpProxy
from xpupool.k8s.informers.kubeconfig import RawNode, load_config
from xpupool.k8s.informers.watch import Event, EventType, Informer

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def cluster() -> Iterator[K8sCluster]:
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(scheduler=False, apiserver_args=["--watch-cache=false"]) as kc:
        yield kc


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def until(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s} s")
        time.sleep(0.05)


def test_changes_while_away_arrive_once_after_a_real_410(cluster: K8sCluster) -> None:
    api = cluster.api
    for name, labels in [("keep", {"v": "1"}), ("change", {"v": "1"}), ("drop", {"v": "1"})]:
        api.post("/api/v1/nodes", json=node(name, **labels)).raise_for_status()
    port = int(cluster.api_url.rsplit(":", 1)[1])
    proxy = TcpProxy(("127.0.0.1", port))
    conf = cluster.dir / "kubeconfig-proxy"
    write_kubeconfig(conf, proxy.url)
    events: list[Event[dict[str, str]]] = []
    informer: Informer[dict[str, str]] = Informer(
        load_config(conf),
        RawNode,
        lambda obj: dict(obj["metadata"].get("labels") or {}),
        events.append,
        resync_s=0,
        backoff_cap_s=0.5,
    )
    try:
        informer.start()
        assert informer.wait_synced(20)
        assert sorted(e.key for e in events) == ["change", "drop", "keep"]
        assert all(e.type is EventType.ADDED for e in events)
        events.clear()

        proxy.cut()
        until(lambda: informer.errors >= 2)  # cut off: the watch ended, retries fail
        api.delete("/api/v1/nodes/drop").raise_for_status()
        api.patch(
            "/api/v1/nodes/change",
            json={"metadata": {"labels": {"v": "2"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        ).raise_for_status()
        api.post("/api/v1/nodes", json=node("new", v="1")).raise_for_status()
        api.delete("/api/v1/nodes/keep").raise_for_status()  # gone and back under the same name
        api.post("/api/v1/nodes", json=node("keep", v="1")).raise_for_status()
        cluster.compact_etcd()
        assert informer.expired == 0 and informer.lists == 1
        proxy.resume()

        until(lambda: informer.lists >= 2 and len(events) >= 5)
        time.sleep(0.5)  # nothing more may come
        assert informer.expired >= 1  # the resumed watch met a real 410
        seen = sorted((e.key, e.type.value, tuple(sorted(e.value.items()))) for e in events)
        assert seen == [
            ("change", "MODIFIED", (("v", "2"),)),
            ("drop", "DELETED", (("v", "1"),)),
            ("keep", "ADDED", (("v", "1"),)),
            ("keep", "DELETED", (("v", "1"),)),
            ("new", "ADDED", (("v", "1"),)),
        ]
        keep = [e for e in events if e.key == "keep"]
        assert [e.type for e in keep] == [EventType.DELETED, EventType.ADDED]
        assert keep[0].uid != keep[1].uid
        assert sorted(informer.keys()) == ["change", "keep", "new"]

        events.clear()  # and the watch goes on from the new list
        api.delete("/api/v1/nodes/new").raise_for_status()
        until(lambda: [(e.key, e.type) for e in events] == [("new", EventType.DELETED)])
    finally:
        informer.stop()
        proxy.close()


def test_resync_lists_again_and_delivers_nothing_unchanged(cluster: K8sCluster) -> None:
    cluster.api.post("/api/v1/nodes", json=node("steady", v="1")).raise_for_status()
    events: list[Event[dict[str, str]]] = []
    informer: Informer[dict[str, str]] = Informer(
        load_config(cluster.kubeconfig),
        RawNode,
        lambda obj: dict(obj["metadata"].get("labels") or {}),
        events.append,
        resync_s=0.3,
    )
    try:
        informer.start()
        assert informer.wait_synced(20)
        until(lambda: informer.lists >= 4)
        assert [e.key for e in events].count("steady") == 1  # listed four times, told once
        assert all(e.type is EventType.ADDED for e in events)
        assert informer.errors == 0  # the watches were cut for the resyncs, not failed
    finally:
        stopping = time.monotonic()
        informer.stop()
        assert time.monotonic() - stopping < 2.0  # an open watch is cut, not waited out


def test_a_short_cut_resumes_the_watch_without_listing(cluster: K8sCluster) -> None:
    port = int(cluster.api_url.rsplit(":", 1)[1])
    proxy = TcpProxy(("127.0.0.1", port))
    conf = cluster.dir / "kubeconfig-proxy-2"
    write_kubeconfig(conf, proxy.url)
    events: list[Event[dict[str, str]]] = []
    informer: Informer[dict[str, str]] = Informer(
        load_config(conf),
        RawNode,
        lambda obj: dict(obj["metadata"].get("labels") or {}),
        events.append,
        resync_s=0,
        backoff_cap_s=0.5,
    )
    try:
        informer.start()
        assert informer.wait_synced(20)
        events.clear()
        proxy.cut()
        until(lambda: informer.errors >= 2)
        cluster.api.post("/api/v1/nodes", json=node("while-cut", v="1")).raise_for_status()
        proxy.resume()  # etcd still has the history: the watch resumes where it stopped
        until(lambda: [e.key for e in events] == ["while-cut"])
        assert events[0].type is EventType.ADDED
        assert informer.lists == 1 and informer.expired == 0
    finally:
        informer.stop()
        proxy.close()
