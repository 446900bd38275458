"""The node agent's pass against a small in-memory apiserver behind lightkube's real client
(an httpx2 MockTransport, STYLE.md section 3): it patches only what changed, guards each patch with
the resourceVersion it read, re-reads on 409 a bounded number of times, leaves everyone else's
annotations alone, and reports what it did in its metrics."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client, KubeConfig
from prometheus_client import generate_latest

from xpupool.agent.monitor import Monitor
from xpupool.k8s.codec.node_annotations import DEVICES_KEY, HEARTBEAT_KEY, decode_devices
from xpupool.k8s.node_agent.agent import NodeAgent, NodeAgentError, make_registry
from xpupool.probes import FakeProbe

FAKE = Path(__file__).parents[2] / "fixtures" / "agent" / "fake-a100x2.yaml"
NODE = "gpu-a"


class FakeApiserver:
    """One Node, GET and merge PATCH as kube-apiserver serves them: a patch whose
    metadata.resourceVersion is not the stored one is a 409 Conflict Status, and every write
    bumps the resourceVersion. ``before_patch`` runs first on each PATCH (a concurrent writer)."""

    def __init__(self) -> None:
        self.rv = 1
        self.annotations: dict[str, str] = {"other.io/keep": "yes"}
        self.labels = {"kubernetes.io/hostname": NODE}
        self.patches: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        self.gets = 0
        self.before_patch: Callable[[], None] = lambda: None
        self.fail_with: int | None = None

    def node(self) -> dict[str, Any]:
        meta = {"name": NODE, "resourceVersion": str(self.rv), "labels": dict(self.labels)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {**meta, "annotations": dict(self.annotations)},
        }

    def status(self, code: int, reason: str, message: str) -> httpx2.Response:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        return httpx2.Response(code, json=body)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path != f"/api/v1/nodes/{NODE}":
            return self.status(404, "NotFound", f'nodes "{request.url.path}" not found')
        if self.fail_with is not None:
            return self.status(self.fail_with, "Forbidden", "denied by the test")
        if request.method == "GET":
            self.gets += 1
            return httpx2.Response(200, json=self.node())
        assert request.method == "PATCH"
        self.before_patch()
        self.content_types.append(request.headers["content-type"])
        patch = json.loads(request.content)
        self.patches.append(patch)
        meta = patch["metadata"]
        if meta.get("resourceVersion") != str(self.rv):
            return self.status(409, "Conflict", "the object has been modified")
        for key, value in meta.get("annotations", {}).items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        self.rv += 1
        return httpx2.Response(200, json=self.node())

    def concurrent_write(self) -> None:
        """Someone else (kubelet, an admin) writes the Node."""
        self.labels["touched"] = str(self.rv)
        self.rv += 1


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 27, 5, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=30)
        return self.now


@pytest.fixture
def api() -> FakeApiserver:
    return FakeApiserver()


def make_agent(api: FakeApiserver, path: Path = FAKE, **kw: Any) -> NodeAgent:
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "t", "cluster": {"server": "http://apiserver.test"}}],
            "users": [{"name": "t", "user": {"token": "t"}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            "current-context": "t",
        }
    )
    client = Client(config, transport=httpx2.MockTransport(api.handle))
    return NodeAgent(client, NODE, Monitor([FakeProbe(path)]), clock=Clock(), **kw)


def test_first_pass_writes_devices_and_heartbeat_then_only_the_heartbeat(
    api: FakeApiserver,
) -> None:
    agent = make_agent(api)
    first = agent.sync()
    assert first.written == (DEVICES_KEY, HEARTBEAT_KEY)
    devices = decode_devices(api.annotations[DEVICES_KEY])
    assert [d.uuid for d in devices] == ["GPU-fake-a100-0", "GPU-fake-a100-1"]
    assert api.annotations[HEARTBEAT_KEY] == "2026-11-27T05:00:30Z"
    assert api.annotations["other.io/keep"] == "yes"  # a merge patch of our keys only
    assert api.content_types == ["application/merge-patch+json"]
    assert api.patches[0]["metadata"]["resourceVersion"] == "1"

    second = agent.sync()
    assert second.written == (HEARTBEAT_KEY,)
    assert set(api.patches[1]["metadata"]["annotations"]) == {HEARTBEAT_KEY}
    assert agent.stats.writes == {DEVICES_KEY: 1, HEARTBEAT_KEY: 2}


def test_a_changed_device_file_is_written_again(api: FakeApiserver, tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(FAKE.read_text())
    agent = make_agent(api, path)
    agent.sync()
    path.write_text(FAKE.read_text().replace("count: 2", "count: 3"))
    assert agent.sync().written == (DEVICES_KEY, HEARTBEAT_KEY)
    assert len(decode_devices(api.annotations[DEVICES_KEY])) == 3


def test_nothing_is_sent_when_the_node_already_says_it_all(api: FakeApiserver) -> None:
    agent = make_agent(api)
    agent.sync()
    agent.clock = lambda: datetime(2026, 11, 27, 5, 0, 30, tzinfo=UTC)  # same second again
    assert agent.sync().written == ()
    assert len(api.patches) == 1


def test_a_conflict_is_read_again_and_retried(api: FakeApiserver) -> None:
    agent = make_agent(api)
    writes = iter([True, False])
    api.before_patch = lambda: api.concurrent_write() if next(writes, False) else None
    result = agent.sync()
    assert result.attempts == 2
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == ["1", "2"]
    assert api.labels["touched"] == "1"  # the other writer's change survives
    assert DEVICES_KEY in api.annotations
    assert agent.stats.conflicts == 1 and agent.stats.patches == 1


def test_conflicts_past_the_bound_fail_the_pass_without_a_loop(api: FakeApiserver) -> None:
    agent = make_agent(api, max_attempts=3)
    api.before_patch = api.concurrent_write
    with pytest.raises(NodeAgentError, match="after 3 read-patch attempts"):
        agent.sync()
    assert api.gets == 3 and len(api.patches) == 3
    assert DEVICES_KEY not in api.annotations
    assert agent.stats.failures == 1


def test_a_refusal_names_the_code_and_the_apiserver_message(api: FakeApiserver) -> None:
    api.fail_with = 403
    with pytest.raises(NodeAgentError, match="HTTP 403: denied by the test"):
        make_agent(api).sync()


def test_the_loop_survives_errors_and_stops_on_the_event(api: FakeApiserver) -> None:
    agent = make_agent(api)
    api.fail_with = 403
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop, 0.01))
    thread.start()
    try:
        while agent.stats.failures < 3:
            stop.wait(0.01)
        api.fail_with = None
        while agent.stats.patches < 2:
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert DEVICES_KEY in api.annotations


def test_extra_annotations_ride_in_the_same_patch(api: FakeApiserver) -> None:
    agent = make_agent(
        api, extra=lambda devices: {"hami.io/node-nvidia-register": str(len(devices))}
    )
    agent.sync()
    assert api.annotations["hami.io/node-nvidia-register"] == "2"
    assert len(api.patches) == 1


def test_a_register_annotation_no_longer_written_is_deleted(api: FakeApiserver) -> None:
    """With --hami-register the agent owns HAMi's register keys: when the node's last card of a
    type goes, the type's key goes too (a stale one would keep HAMi placing on missing cards);
    a key it does not own stays."""
    keys = frozenset({"hami.io/node-nvidia-register", "hami.io/node-register-Ascend910B"})
    api.annotations["hami.io/node-register-Ascend910B"] = "[stale]"
    api.annotations["hami.io/node-handshake"] = "Requesting_2026-11-27 05:00:00"
    agent = make_agent(
        api,
        extra=lambda devices: {"hami.io/node-nvidia-register": str(len(devices))},
        extra_keys=keys,
    )
    agent.sync()
    assert api.annotations["hami.io/node-nvidia-register"] == "2"
    assert "hami.io/node-register-Ascend910B" not in api.annotations
    assert api.annotations["hami.io/node-handshake"].startswith("Requesting")
    assert len(api.patches) == 1  # in the same patch as the rest
    assert agent.sync().written == (HEARTBEAT_KEY,)  # nothing left to delete


def test_metrics_show_devices_and_what_the_agent_did(api: FakeApiserver) -> None:
    agent = make_agent(api)
    agent.sync()
    agent.sync()
    text = generate_latest(make_registry(agent)).decode()
    assert (
        'xpupool_agent_device_memory_total_bytes{model="A100-SXM4-80GB",node="gpu-a",'
        'uuid="GPU-fake-a100-0",vendor="nvidia"} 8.589934592e+10' in text
    )
    assert 'xpupool_node_agent_patches_total{node="gpu-a"} 2.0' in text
    assert (
        'xpupool_node_agent_annotation_writes_total{annotation="xpupool.io/devices",node="gpu-a"} 1.0'
        in text
    )
    assert "xpupool_node_agent_last_heartbeat_timestamp_seconds" in text


def test_devices_too_many_for_an_annotation_fail_the_pass_and_write_nothing(
    api: FakeApiserver, tmp_path: Path
) -> None:
    path = tmp_path / "devices.yaml"
    entry = "  - {vendor: nvidia, model: A100, memory: 80Gi, count: 64, uuid_prefix: G%d}\n"
    path.write_text("devices:\n" + "".join(entry % i for i in range(5)))  # 320 > 256 devices
    agent = make_agent(api, path)
    with pytest.raises(NodeAgentError, match="at most 256 devices"):
        agent.sync()
    assert api.patches == [] and agent.stats.failures == 1
