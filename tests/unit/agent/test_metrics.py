"""The agent's own Prometheus metrics: samples from its last probe pass and its replicas, an
unreadable reading absent (not zero), and the HTTP endpoint on a free 127.0.0.1 port."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from agent_work import device, settings, work

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.inventory import node_in
from xpupool.agent.metrics import make_registry, serve_metrics
from xpupool.agent.monitor import Reading
from xpupool.agent.runner import Replica
from xpupool.agent.transport import TransportError
from xpupool.probes.base import DeviceInfo, Health
from xpupool.server.schemas.agent_protocol import Heartbeat, HeartbeatReply, NodeIn

GIB = 1 << 30
MIB = 1 << 20


class Flaky:
    """A transport whose heartbeats fail while ``down`` is set."""

    def __init__(self) -> None:
        self.down = False

    def register(self, node: NodeIn) -> None:
        if self.down:
            raise TransportError("connection refused")

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        if self.down:
            raise TransportError("connection refused")
        return HeartbeatReply(run=[], stop=[], heartbeat_s=5.0)

    def append_log(
        self, node: str, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        pass


class OneCard:
    vendor: ClassVar[str] = "nvidia"

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("nvidia", "H100", "GPU-0", 0, 81559, memory_used_mib=1024)]


def _node(tmp_path: Path) -> HostedNode:
    return HostedNode(name="n1", runner=Runner("n1", tmp_path, settings=settings(tmp_path)))


def _replica(job_id: int, used: dict[str, int] | None, flag: str = "") -> Replica:
    grant = device(0, memory_mib=20480)
    grant.uuid = "GPU-0"
    rep = Replica(work(["true"], job_id=job_id, devices=[grant]), Path("/dev/null"))
    if used is not None:
        rep.memory_used_mib, rep.memory_measured, rep.flag = used, True, flag
    return rep


def test_collector_reads_the_last_pass_and_leaves_out_what_was_not_read(tmp_path: Path) -> None:
    node = _node(tmp_path)
    read = DeviceInfo(
        "nvidia", "H100", "GPU-0", 0, 81559,
        memory_used_mib=2048, utilization_pct=50.0, power_watts=300.0, temperature_c=60.0,
        health=Health.HEALTHY,
    )  # fmt: skip
    unread = DeviceInfo("nvidia", "H100", "GPU-1", 1, 81559)  # every reading None
    node.reading = Reading([read, unread])
    for rep in (_replica(7, {"GPU-0": 30000}, flag="over"), _replica(8, None)):
        node.runner.replicas[rep.key] = rep
    node.last_heartbeat, node.heartbeat_failures = 1_700_000_000.0, 3
    reg = make_registry(Agent(Flaky(), [node]))

    def value(name: str, **labels: str) -> float | None:
        return reg.get_sample_value(name, labels)

    dev0 = {"node": "n1", "uuid": "GPU-0", "vendor": "nvidia", "model": "H100"}
    dev1 = dict(dev0, uuid="GPU-1")
    assert value("xpupool_agent_device_memory_used_bytes", **dev0) == 2048 * MIB
    assert value("xpupool_agent_device_memory_total_bytes", **dev0) == 81559 * MIB
    assert value("xpupool_agent_device_utilization_ratio", **dev0) == 0.5
    assert value("xpupool_agent_device_power_watts", **dev0) == 300.0
    assert value("xpupool_agent_device_temperature_celsius", **dev0) == 60.0
    assert value("xpupool_agent_device_healthy", **dev0) == 1.0
    assert value("xpupool_agent_device_memory_total_bytes", **dev1) == 81559 * MIB
    for name in ("memory_used_bytes", "utilization_ratio", "power_watts", "healthy"):
        assert value(f"xpupool_agent_device_{name}", **dev1) is None  # absent, not 0
    assert value("xpupool_agent_device_temperature_celsius", **dev1) is None
    used = "xpupool_agent_replica_device_memory_used_bytes"
    assert value(used, job="7", replica="0", uuid="GPU-0") == 30000 * MIB
    assert value("xpupool_agent_replica_over_limit", job="7", replica="0") == 1.0
    assert value(used, job="8", replica="0", uuid="GPU-0") is None  # not measured
    assert value("xpupool_agent_replica_over_limit", job="8", replica="0") is None
    assert value("xpupool_agent_replicas_running", node="n1") == 2
    assert value("xpupool_agent_heartbeat_failures_total", node="n1") == 3
    assert value("xpupool_agent_last_heartbeat_timestamp_seconds", node="n1") == 1_700_000_000.0


def test_step_keeps_the_reading_and_counts_failed_heartbeats(tmp_path: Path) -> None:
    t = Flaky()
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, settings=settings(tmp_path)),
        monitor=Monitor([OneCard()]),
        inventory=lambda devices: node_in("n1", devices),
    )
    agent = Agent(t, [node], wall=lambda: 123.0)
    reg = make_registry(agent)
    seen = "xpupool_agent_last_heartbeat_timestamp_seconds"
    assert reg.get_sample_value(seen, {"node": "n1"}) is None  # before the first heartbeat
    agent.step(node)
    t.down = True
    agent.step(node)
    node.registered = None  # and registering again fails too: no heartbeat this period either
    agent.step(node)
    assert reg.get_sample_value(seen, {"node": "n1"}) == 123.0
    assert reg.get_sample_value("xpupool_agent_heartbeat_failures_total", {"node": "n1"}) == 2
    labels = {"node": "n1", "uuid": "GPU-0", "vendor": "nvidia", "model": "H100"}
    assert reg.get_sample_value("xpupool_agent_device_memory_used_bytes", labels) == GIB


@pytest.mark.slow
def test_metrics_endpoint_serves_prometheus_text_until_stopped(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.reading = Reading([DeviceInfo("nvidia", "H100", "GPU-0", 0, 81559)])
    server = serve_metrics(Agent(Flaky(), [node]), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        r = httpx.get(url, timeout=5.0)
    finally:
        server.stop()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert 'xpupool_agent_device_memory_total_bytes{model="H100",node="n1"' in r.text
    assert 'xpupool_agent_replicas_running{node="n1"} 0.0' in r.text
    assert "xpupool_agent_device_power_watts{" not in r.text
    try:
        httpx.get(url, timeout=1.0)
    except httpx.TransportError:
        pass
    else:
        raise AssertionError("metrics still served after stop")


@pytest.mark.slow
def test_a_metrics_token_file_closes_the_port_to_scrapes_without_it(tmp_path: Path) -> None:
    """``--metrics-token-file`` (every agent-side metrics port: this agent's, the Kubernetes
    agent's and extender's): no or a wrong bearer token is 401; the file is read at each scrape,
    so a rotated token takes over at once; an empty file refuses every scrape (503), never
    serves them open."""
    token = tmp_path / "metrics-token"
    token.write_text("s3cret\n")
    node = _node(tmp_path)
    node.reading = Reading([DeviceInfo("nvidia", "H100", "GPU-0", 0, 81559)])
    server = serve_metrics(Agent(Flaky(), [node]), "127.0.0.1", 0, token)
    url = f"http://127.0.0.1:{server.port}/metrics"

    def scrape(sent: str | None) -> httpx.Response:
        headers = {} if sent is None else {"Authorization": f"Bearer {sent}"}
        return httpx.get(url, headers=headers, timeout=5.0)

    try:
        refused = scrape(None)
        assert refused.status_code == 401 and "GPU-0" not in refused.text
        assert refused.headers["www-authenticate"] == "Bearer"
        assert scrape("wrong").status_code == 401
        r = scrape("s3cret")
        assert r.status_code == 200 and 'uuid="GPU-0"' in r.text
        token.write_text("rotated")
        assert scrape("s3cret").status_code == 401
        assert scrape("rotated").status_code == 200
        token.write_text("")
        assert scrape("rotated").status_code == 503
        assert scrape(None).status_code == 503
    finally:
        server.stop()
