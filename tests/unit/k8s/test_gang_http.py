"""A gang larger than the server's default thread pool binds through the extender's real HTTP
server (uvicorn, the app ``xpupool k8s extender`` serves): every member's bind waits in a thread
for the rest, so the binds need a thread each, and the filters of the members still to come must
not queue behind them. The Kubernetes API is a fake recording the Bindings."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
import uvicorn

from xpupool.k8s.extender.gang import Gangs
from xpupool.k8s.extender.http_app import create_app
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node

SIZE = 60  # over anyio's 40 default worker threads


class FakeApi:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods
        self.bound: dict[str, str] = {}
        self.lock = threading.Lock()

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pods[name]

    def annotate_pod(
        self, namespace: str, name: str, resource_version: str, annotations: Mapping[str, str]
    ) -> None:
        pass

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        with self.lock:
            self.bound[name] = node


def member(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"m{i}",
            "namespace": "ns",
            "uid": f"uid-m{i}",
            "resourceVersion": "1",
            "annotations": {"xpupool.io/gang": "big", "xpupool.io/gang-size": str(SIZE)},
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }


@pytest.fixture
def served() -> Iterator[tuple[str, FakeApi, Gangs]]:
    view = ClusterView(lambda o: None, lambda o: None, profile="binpack")
    names = [f"n{i}" for i in range(8)]
    for name in names:
        node = gpu_node(name, count=8)
        view.on_node(Event(EventType.ADDED, name, f"uid-{name}", NodeRecord(node, True)))
    pods = {f"m{i}": member(i) for i in range(SIZE)}
    api = FakeApi(pods)
    gangs = Gangs(view, wait_s=5)
    app = create_app(Extender(view, api, lambda n, d, a: {}, gangs), lambda t: True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", api, gangs
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.slow
def test_a_gang_of_sixty_binds_over_http(served: tuple[str, FakeApi, Gangs]) -> None:
    url, api, _ = served
    nodes = [f"n{i}" for i in range(8)]
    results: dict[str, Any] = {}

    def schedule(i: int) -> None:
        try:
            one(i)
        except Exception as exc:  # seen in the assertion, not lost in the thread
            results[f"m{i}"] = repr(exc)

    def one(i: int) -> None:
        """What kube-scheduler does per member: filter, then bind (async) on a node kept."""
        with httpx.Client(timeout=30) as client:
            body = {"Pod": member(i), "Nodes": None, "NodeNames": nodes}
            kept = client.post(f"{url}/filter", json=body).json()
            if kept.get("Error") or not kept.get("NodeNames"):
                results[f"m{i}"] = kept
                return
            (node,) = kept["NodeNames"]  # its own place's node, nowhere else
            bind = {"PodName": f"m{i}", "PodNamespace": "ns", "PodUID": f"uid-m{i}", "Node": node}
            results[f"m{i}"] = client.post(f"{url}/bind", json=bind).json().get("Error", "")

    threads = []
    for i in range(SIZE):  # members arrive one after another, as kube-scheduler's cycles run
        t = threading.Thread(target=schedule, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.01)
    for t in threads:
        t.join(30)
    assert results == {f"m{i}": "" for i in range(SIZE)}, {k: v for k, v in results.items() if v}
    assert len(api.bound) == SIZE
