"""The standalone agent's own Prometheus endpoint (``xpupool agent --metrics-port``).

The server's ``/metrics`` shows what agents reported in heartbeats; this one shows what the agent
reads now, so a node can be watched even while its server is unreachable, and it carries what only
the agent knows (device memory per replica, failed heartbeats). Samples are read at scrape time
from the agent's own state, the last probe pass each node kept and its runner's replicas, never
from a second copy kept for metrics. A reading the probe could not take is absent, never zero
(issue 6); the monitor has already logged why.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xpupool.agent.agent import Agent
from xpupool.agent.monitor import Reading, device_metrics

MIB = 1 << 20
_DEVICE = ["node", "uuid", "vendor", "model"]
_REPLICA = ["job", "replica", "uuid"]


def device_families(readings: Iterable[tuple[str, Reading | None]]) -> list[Metric]:
    """Per device gauges of each ``(node name, last probe pass)``; a node with no pass yet has
    none. Shared by this agent and the Kubernetes node agent (``k8s/node_agent.py``), so one
    dashboard reads both."""

    def gauge(name: str, text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"xpupool_agent_device_{name}", text, labels=_DEVICE)

    used = gauge("memory_used_bytes", "Device memory in use, as the probe reads it.")
    total = gauge("memory_total_bytes", "Device memory capacity, as the probe reads it.")
    util = gauge("utilization_ratio", "Device busy ratio (0..1), as the probe reads it.")
    power = gauge("power_watts", "Board power draw.")
    temp = gauge("temperature_celsius", "Device temperature.")
    healthy = gauge("healthy", "1 if the probe reads the device healthy, 0 if not.")
    for node_name, reading in readings:
        for d in reading.devices if reading is not None else ():
            lv = [node_name, d.uuid, d.vendor, d.canonical_model or d.model]
            m = device_metrics(d)
            total.add_metric(lv, d.memory_total_mib * MIB)
            if m.memory_used_mib is not None:
                used.add_metric(lv, m.memory_used_mib * MIB)
            if m.utilization_pct is not None:
                util.add_metric(lv, m.utilization_pct / 100)
            if m.power_w is not None:
                power.add_metric(lv, m.power_w)
            if m.temperature_c is not None:
                temp.add_metric(lv, m.temperature_c)
            if m.healthy is not None:
                healthy.add_metric(lv, 1.0 if m.healthy else 0.0)
    return [used, total, util, power, temp, healthy]


class AgentCollector(Collector):
    """Per device, per replica and per node samples of ``agent``'s hosted nodes. Reads state the
    agent loop writes on its own thread: each node's ``reading`` is replaced whole each pass and
    the replicas are copied to a list before they are read, so a scrape never sees a half pass."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        yield from self._devices()
        yield from self._replicas()
        yield from self._nodes()

    def _devices(self) -> Iterator[Metric]:
        yield from device_families((node.name, node.reading) for node in self.agent.nodes)

    def _replicas(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "xpupool_agent_replica_device_memory_used_bytes",
            "Device memory the replica's processes use on a card (per-process probe reading).",
            labels=_REPLICA,
        )
        over = GaugeMetricFamily(
            "xpupool_agent_replica_over_limit",
            "1 if the replica uses more device memory than it was granted, else 0.",
            labels=["job", "replica"],
        )
        for node in self.agent.nodes:
            for rep in list(node.runner.replicas.values()):
                if rep.state != "running" or not rep.memory_measured:
                    continue
                job, replica = str(rep.work.job_id), str(rep.work.replica)
                for uuid, mib in rep.memory_used_mib.items():
                    used.add_metric([job, replica, uuid], mib * MIB)
                over.add_metric([job, replica], 1.0 if rep.flag else 0.0)
        yield from (used, over)

    def _nodes(self) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "xpupool_agent_replicas_running", "Replicas with live processes.", labels=["node"]
        )
        failures = CounterMetricFamily(
            "xpupool_agent_heartbeat_failures",
            "Heartbeat periods without an answered heartbeat (unreachable, unregistered, unknown node).",
            labels=["node"],
        )
        seen = GaugeMetricFamily(
            "xpupool_agent_last_heartbeat_timestamp_seconds",
            "Unix time of the last heartbeat the server answered; absent before the first.",
            labels=["node"],
        )
        for node in self.agent.nodes:
            reps = list(node.runner.replicas.values())
            running.add_metric([node.name], sum(1 for r in reps if r.state == "running"))
            failures.add_metric([node.name], node.heartbeat_failures)
            if node.last_heartbeat is not None:
                seen.add_metric([node.name], node.last_heartbeat)
        yield from (running, failures, seen)


def make_registry(agent: Agent) -> CollectorRegistry:
    """A registry of its own (no process or platform collectors; tests run several agents)."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    return registry


@dataclass
class MetricsServer:
    """prometheus_client's HTTP server on a daemon thread; ``port`` is the bound one."""

    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)


def serve_metrics(agent: Agent, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serve ``agent``'s metrics at ``http://host:port/metrics`` until ``stop``; port 0 takes a
    free one (the CLI reads 0 as off before calling this). Raises OSError if it cannot bind."""
    return serve_registry(make_registry(agent), host, port)


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """prometheus_client's HTTP server for ``registry`` on a daemon thread; OSError if it cannot
    bind."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread)
