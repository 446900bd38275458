"""The standalone agent's own Prometheus endpoint (``xpupool agent --metrics-port``), and the
HTTP server every agent-side metrics port runs on (the Kubernetes agent's and extender's too),
open or behind a bearer token (``--metrics-token-file``).

The server's ``/metrics`` shows what agents reported in heartbeats; this one shows what the agent
reads now, so a node can be watched even while its server is unreachable, and it carries what only
the agent knows (device memory per replica, failed heartbeats). Samples are read at scrape time
from the agent's own state, the last probe pass each node kept and its runner's replicas, never
from a second copy kept for metrics. A reading the probe could not take is absent, never zero
(issue 6); the monitor has already logged why.
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from threading import Thread
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xpupool.agent.agent import Agent
from xpupool.agent.monitor import Reading, device_metrics
from xpupool.server.schemas.agent_protocol import ReplicaState

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

MIB = 1 << 20
_DEVICE = ["node", "uuid", "vendor", "model"]
_REPLICA = ["job", "replica", "uuid"]


def device_families(readings: Iterable[tuple[str, Reading | None]]) -> list[Metric]:
    """Per device gauges of each ``(node name, last probe pass)``; a node with no pass yet has
    none. Shared by this agent and the Kubernetes node agent (``k8s/node_agent/agent.py``), so one
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
                if rep.state is not ReplicaState.RUNNING or not rep.memory_measured:
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
            running.add_metric([node.name], sum(1 for r in reps if r.state is ReplicaState.RUNNING))
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


def serve_metrics(
    agent: Agent, host: str = "127.0.0.1", port: int = 0, token_file: Path | None = None
) -> MetricsServer:
    """Serve ``agent``'s metrics at ``http://host:port/metrics`` until ``stop``; port 0 takes a
    free one (the CLI reads 0 as off before calling this). Raises OSError if it cannot bind."""
    return serve_registry(make_registry(agent), host, port, token_file)


def serve_registry(
    registry: CollectorRegistry, host: str, port: int, token_file: Path | None = None
) -> MetricsServer:
    """Prometheus exposition of ``registry`` at ``http://host:port/metrics`` until ``stop``.
    ``token_file``: a scrape must carry ``Authorization: Bearer <the file's text>``
    (:func:`bearer_only`); None: anyone who reaches the port reads them. OSError if it cannot
    bind."""
    app = make_wsgi_app(registry)
    return serve_wsgi(app if token_file is None else bearer_only(app, token_file), host, port)


def serve_wsgi(
    app: WSGIApplication, host: str, port: int, name: str = "xpupool-metrics"
) -> MetricsServer:
    """``app`` on a threaded HTTP server on a daemon thread, one line per request never logged:
    the server of every agent-side metrics port (this agent's, the Kubernetes agent's and the
    extender's, ``k8s/extender/http_app.py``). OSError if it cannot bind."""
    server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
    server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    thread = Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return MetricsServer(server, thread)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress does not hold the process at exit


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No line per scrape or probe."""


def bearer_only(app: WSGIApplication, token_file: Path) -> WSGIApplication:
    """``app`` for requests that carry the token in ``token_file`` as a bearer token
    (``--metrics-token-file``); 401 for the rest, 503 while the file cannot be read or is empty
    (refused, never open). The file is read at each request, so a rotated Kubernetes Secret
    takes over without a restart."""

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            expected = token_file.read_text().strip()
        except OSError as exc:
            expected, why = "", f"cannot read {token_file}: {exc.strerror or exc}"
        else:
            why = f"{token_file} is empty"
        if not expected:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"metrics token unavailable: {why}\n".encode()]
        scheme, _, sent = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            sent.strip().encode(), expected.encode()
        ):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")],
            )
            return [b"missing or wrong bearer token (--metrics-token-file)\n"]
        return app(environ, start_response)

    return guarded
