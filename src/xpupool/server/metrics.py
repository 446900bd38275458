"""Prometheus metrics for the server, read from live state at scrape time (no double books).

A reading an agent could not take is absent from the scrape, never zero (issue 6). Names follow
Prometheus conventions: base units (bytes, seconds, ratios), ``_total`` for counters.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from xpupool.server.domain_gauges import domain_gauges
from xpupool.server.plane import ControlPlane
from xpupool.server.rate_limit import RateLimiter
from xpupool.server.service_traffic import TrafficCollector
from xpupool.server.stranded_gauges import stranded_gauges
from xpupool.server.usage.counters import UsageCollector

MIB = 1 << 20
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class PlaneCollector(Collector):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        from xpupool.server.services import fleet

        p = self.plane
        dev_labels = ["node", "site", "uuid", "vendor", "model"]
        g = {
            "alloc_mem": GaugeMetricFamily(
                "xpupool_device_memory_allocated_bytes",
                "Device memory granted to jobs (committed; above the total only under over-commit).",
                labels=dev_labels,
            ),
            "total_mem": GaugeMetricFamily(
                "xpupool_device_memory_total_bytes",
                "Device memory capacity (physical).",
                labels=dev_labels,
            ),
            "commit_mem": GaugeMetricFamily(
                "xpupool_device_memory_committable_bytes",
                "The most device memory that may be granted: capacity times the card's memory "
                "over-commit factor (capacity when there is none).",
                labels=dev_labels,
            ),
            "alloc_cores": GaugeMetricFamily(
                "xpupool_device_cores_allocated_ratio",
                "Share of the device's compute granted to jobs (1 = the whole card; above 1 only "
                "under a cores over-commit factor).",
                labels=dev_labels,
            ),
            "commit_cores": GaugeMetricFamily(
                "xpupool_device_cores_committable_ratio",
                "The most compute that may be granted, in cards: the cores over-commit factor.",
                labels=dev_labels,
            ),
            "used_mem": GaugeMetricFamily(
                "xpupool_device_memory_used_bytes",
                "Device memory in use, as the probe reads it.",
                labels=dev_labels,
            ),
            "util": GaugeMetricFamily(
                "xpupool_device_utilization_ratio",
                "Device busy ratio (0..1), as the probe reads it.",
                labels=dev_labels,
            ),
            "power": GaugeMetricFamily(
                "xpupool_device_power_watts", "Board power draw.", labels=dev_labels
            ),
            "temp": GaugeMetricFamily(
                "xpupool_device_temperature_celsius", "Device temperature.", labels=dev_labels
            ),
            "health": GaugeMetricFamily(
                "xpupool_device_healthy", "1 if the device is healthy, else 0.", labels=dev_labels
            ),
        }
        for d in fleet.list_devices(p, who=None):
            lv = [d.node, d.site, d.uuid, d.vendor, d.canonical_model or d.model]
            g["alloc_mem"].add_metric(lv, d.allocated_memory_mib * MIB)
            g["total_mem"].add_metric(lv, d.memory_mib * MIB)
            g["commit_mem"].add_metric(lv, d.committable_memory_mib * MIB)
            g["alloc_cores"].add_metric(lv, d.allocated_core_permille / 1000)
            g["commit_cores"].add_metric(lv, d.committable_core_permille / 1000)
            g["health"].add_metric(lv, 1.0 if d.healthy else 0.0)
            m = d.metrics
            if m is None:
                continue
            if m.memory_used_mib is not None:
                g["used_mem"].add_metric(lv, m.memory_used_mib * MIB)
            if m.utilization_pct is not None:
                g["util"].add_metric(lv, m.utilization_pct / 100)
            if m.power_w is not None:
                g["power"].add_metric(lv, m.power_w)
            if m.temperature_c is not None:
                g["temp"].add_metric(lv, m.temperature_c)
        yield from g.values()
        events = CounterMetricFamily(
            "xpupool_device_health_events",
            "Cards read unhealthy (or warned) since the server started, by cause kind "
            "(xid-79, ecc-uncorrectable, ...: server/card_health.py).",
            labels=["cause"],
        )
        for cause, count in sorted(p.card_health.counts().items()):
            events.add_metric([cause], float(count))
        yield events
        yield from self._stranded()
        yield from self._domains()
        yield from self._history()
        yield from self._power_saving()

        node_up = GaugeMetricFamily(
            "xpupool_node_ready", "1 if the node is ready, 0 if lost.", labels=["node", "site"]
        )
        node_sched = GaugeMetricFamily(
            "xpupool_node_schedulable",
            "1 if new work may land on the node.",
            labels=["node", "site"],
        )
        node_cpu = GaugeMetricFamily(
            "xpupool_node_cpu_allocated_cores",
            "CPU granted to jobs, cores.",
            labels=["node", "site"],
        )
        node_seen = GaugeMetricFamily(
            "xpupool_node_last_heartbeat_timestamp_seconds",
            "Unix time of the node's last heartbeat or registration; absent before the first.",
            labels=["node", "site"],
        )
        for n in fleet.list_nodes(p):
            node_up.add_metric([n.name, n.site], 1.0 if n.status == "ready" else 0.0)
            node_sched.add_metric([n.name, n.site], 1.0 if n.schedulable else 0.0)
            node_cpu.add_metric([n.name, n.site], n.cpu_allocated_milli / 1000)
            if n.last_heartbeat is not None:
                node_seen.add_metric([n.name, n.site], n.last_heartbeat)
        yield from (node_up, node_sched, node_cpu, node_seen)

        pending = GaugeMetricFamily(
            "xpupool_queue_pending_jobs", "Jobs waiting in the queue.", labels=["queue", "tenant"]
        )
        running = GaugeMetricFamily(
            "xpupool_queue_running_jobs", "Jobs holding devices.", labels=["queue", "tenant"]
        )
        quota = GaugeMetricFamily(
            "xpupool_queue_quota_used",
            "Quota charged, in the resource's unit.",
            labels=["queue", "tenant", "flavor", "resource"],
        )
        nominal = GaugeMetricFamily(
            "xpupool_queue_quota_nominal",
            "Nominal quota, in the resource's unit.",
            labels=["queue", "tenant", "flavor", "resource"],
        )

        def add_queues() -> None:  # the families are this scrape's own: filled from one state
            for name, spec in p.queue_specs.items():
                pending.add_metric(
                    [name, spec.tenant], sum(1 for j in p.queued.values() if j.queue == name)
                )
                running.add_metric(
                    [name, spec.tenant], sum(1 for j in p.held_jobs.values() if j.queue == name)
                )
                usage = p.admission.usage.get(name, {})
                for q in spec.quotas:
                    lv = [name, spec.tenant, q.flavor, q.resource.value]
                    quota.add_metric(lv, usage.get((q.flavor, q.resource), 0))
                    nominal.add_metric(lv, q.nominal)

        p.read(add_queues)
        yield from (pending, running, quota, nominal)
        yield self._replica_memory()
        yield self._heartbeats()

    def _power_saving(self) -> Iterator[GaugeMetricFamily]:
        """Cards that could sleep and nodes that could be powered down (server/power_saving.py)."""
        from xpupool.server.services.power import look

        seen = look(self.plane)
        cards = GaugeMetricFamily(
            "xpupool_cards_could_sleep", "Usable cards holding nothing (could sleep)"
        )
        cards.add_metric([], len(seen.cards))
        watts = GaugeMetricFamily(
            "xpupool_could_sleep_watts", "Idle power of the cards that could sleep, W"
        )
        watts.add_metric([], seen.idle_watts)
        nodes = GaugeMetricFamily(
            "xpupool_nodes_could_power_down",
            "Nodes nothing has held for the power-down period (could be powered down)",
        )
        nodes.add_metric([], len(seen.nodes))
        yield from (cards, watts, nodes)

    def _stranded(self) -> Iterator[GaugeMetricFamily]:
        """Per node, idle device capacity no pending job's shape nor a common one can use now:
        the fleet overview's figure (``services/overview.py``, docs/capacity.md), so the gauges
        add up to what the overview and the dashboard show."""
        from xpupool.server.services.overview import stranded_now

        p = self.plane
        gauges = p.read(
            lambda: stranded_gauges(
                p.engine.live_nodes(), stranded_now(p), lambda name: name in p.node_records
            )
        )
        yield from gauges

    def _domains(self) -> Iterator[GaugeMetricFamily]:
        """Per site and link domain, its nodes and cards (``server/domain_gauges.py``: only
        where some node has a domain, a bounded number of series)."""
        from xpupool.server.services.domain_tally import any_named, domain_tally

        p = self.plane
        yield from domain_gauges(p.read(lambda: domain_tally(p) if any_named(p) else []))

    def _history(self) -> Iterator[GaugeMetricFamily]:
        """The fleet history's last sample (``server/history.py``), one gauge per series,
        labelled site and model ('' = every one): few labels, whatever the pool's size."""
        from xpupool.server.history import METRICS, latest

        rows = latest(self.plane)
        for series, name, text, scale in METRICS:
            gauge = GaugeMetricFamily(name, text, labels=["site", "model"])
            for row in rows:
                value = row.get(series)
                if isinstance(value, int | float):
                    gauge.add_metric([str(row["site"]), str(row["model"])], float(value) * scale)
            yield gauge

    def _heartbeats(self) -> CounterMetricFamily:
        """Heartbeats the server accepted, per node, since it started: counted here instead of
        one audit row each (``server/audit.py``)."""
        beats = CounterMetricFamily(
            "xpupool_agent_heartbeats",
            "Agent heartbeats accepted per node since the server started.",
            labels=["node"],
        )
        for node, count in sorted(self.plane.audit.heartbeat_counts().items()):
            beats.add_metric([node], count)
        return beats

    def _replica_memory(self) -> GaugeMetricFamily:
        """What the agents measured per replica and card (NVML running processes); a replica
        whose agent cannot measure it has no sample, and a released job's samples are gone."""
        used = GaugeMetricFamily(
            "xpupool_replica_device_memory_used_bytes",
            "Device memory a replica's processes use on a card, as its agent last measured it.",
            labels=["job", "replica", "node", "uuid"],
        )
        for job_id, replica, node, uuid, mib in self.plane.replica_memory():
            used.add_metric([str(job_id), str(replica), node, uuid], mib * MIB)
        return used


class RateLimitCollector(Collector):
    """Requests refused over a rate limit: a legitimate client that meets one shows here."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    def collect(self) -> Iterator[CounterMetricFamily]:
        refused = CounterMetricFamily(
            "xpupool_http_rate_limited",
            "Requests answered 429 over a rate limit since the server started, by limit: "
            "'token' (--rate-limit) or 'address' (--address-rate-limit).",
            labels=["limit"],
        )
        for limit in ("token", "address"):
            refused.add_metric([limit], self.limiter.refused[limit])
        yield refused


def make_registry(plane: ControlPlane, limiter: RateLimiter | None = None) -> CollectorRegistry:
    """A registry of its own per server (tests run several in one process)."""
    registry = CollectorRegistry()
    registry.register(PlaneCollector(plane))
    registry.register(TrafficCollector(lambda: plane.service_traffic))
    registry.register(UsageCollector(plane))  # metering's counters (usage/counters.py)
    if limiter is not None:
        registry.register(RateLimitCollector(limiter))
    latency = Histogram(
        "xpupool_scheduling_latency_seconds",
        "From submission (or requeue) to placement.",
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    pass_time = Histogram(
        "xpupool_scheduling_pass_seconds",
        "Duration of one scheduling pass.",
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )

    def observe(event: str, seconds: float) -> None:
        if event == "scheduled":
            latency.observe(max(seconds, 0.0))
        elif event == "pass":
            pass_time.observe(seconds)

    plane.observers.append(observe)
    return registry
