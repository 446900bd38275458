"""A Kubernetes site's card power samples (issue 52): the plane reads each of the site's nodes'
xpupool node agent ``/metrics`` (the DaemonSet's port, behind the chart's bearer token) every
``node_metrics.every_s`` and keeps the cards' readings as an agent's heartbeat's are kept
(``services/agents.site_metrics``), so the meter's energy, the live metrics and the idle power
figures of a Kubernetes site's cards come from the same one path as an agent site's.

Scraping, not the agents posting: the node agent holds no plane credentials and must keep
working while the plane is away (it writes only its Node), and the metrics port and token
exist already for Prometheus (``deploy/helm``). The scraped text is hostile: read at most
:data:`MAX_BYTES`, parsed by prometheus_client's parser, a reading kept only for a card the
node has in the plane's books and only inside the range a reading may take. It runs on a thread
of its own, at most ``in_flight`` nodes at once, each bounded by ``timeout_s``: a node that does
not answer costs its round that long and never holds the site's watches or worker.

Where a node's agent answers: the URL template with the node's name (``node_metrics.url``), or,
with ``node_metrics.service``, the agents' Service's ready endpoint on that node, from its
EndpointSlices (``agent_endpoints.py``; the chart's agents listen on their pods' IPs). A node
with no ready endpoint is skipped in that round, not failed.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

from xpupool.k8s.informers.watch import Informer
from xpupool.k8s.site.agent_endpoints import AgentEndpoints
from xpupool.k8s.site.endpoint_slices import SliceEndpoints
from xpupool.k8s.site.sites_file import NodeMetricsConfig
from xpupool.model.errors import NotFound
from xpupool.server.schemas.agent_protocol import DeviceMetrics
from xpupool.server.secret_box import SealBrokenError
from xpupool.server.services import agents
from xpupool.server.services.secrets import admin_secret

if TYPE_CHECKING:
    from lightkube.config.kubeconfig import SingleConfig

    from xpupool.server.plane import ControlPlane, NodeRecord

__all__ = ["MAX_BYTES", "NodePower", "parse_readings"]

log = logging.getLogger(__name__)

MAX_BYTES = 1 << 20  # a node of 16 cards prints a few KiB; more is not a node agent's answer
# the node agent's gauges (agent/metrics.device_families): field, scale, the range kept
_GAUGES: Mapping[str, tuple[str, float, float, float]] = {
    "xpupool_agent_device_power_watts": ("power_w", 1.0, 0.0, 100_000.0),
    "xpupool_agent_device_utilization_ratio": ("utilization_pct", 100.0, 0.0, 100.0),
    "xpupool_agent_device_memory_used_bytes": ("memory_used_mib", 1.0 / (1 << 20), 0.0, 2.0**50),
    "xpupool_agent_device_temperature_celsius": ("temperature_c", 1.0, -100.0, 1000.0),
}


class ScrapeError(Exception):
    """One node's scrape failed; the message says why."""


def parse_readings(text: str, cards: Collection[str]) -> list[DeviceMetrics]:
    """The readings of ``cards`` in ``text`` (a node agent's exposition): a card the text names
    and ``cards`` does not is left out, as is a value that is no number or outside its range.
    Raises :class:`ScrapeError` when the text is no Prometheus exposition."""
    found: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                gauge = _GAUGES.get(sample.name)
                uuid = sample.labels.get("uuid")
                if gauge is None or uuid is None or uuid not in cards:
                    continue
                field, scale, lo, hi = gauge
                value = float(sample.value) * scale
                if math.isfinite(value) and lo <= value <= hi:
                    found.setdefault(uuid, {})[field] = value
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ScrapeError(f"not a Prometheus exposition: {str(exc)[:200]}") from None
    out = []
    for uuid, values in sorted(found.items()):
        used = values.get("memory_used_mib")
        out.append(
            DeviceMetrics(
                uuid=uuid,
                memory_used_mib=None if used is None else int(used),
                utilization_pct=values.get("utilization_pct"),
                power_w=values.get("power_w"),
                temperature_c=values.get("temperature_c"),
                health_cause=None,
            )
        )
    return out


class NodePower:
    """Scrapes the site's nodes (``owns``: the node records that are the site's) as
    ``config`` says; :meth:`start` runs rounds on a thread until :meth:`stop`, :meth:`round`
    is one (tests call it). ``failed`` holds each node whose last scrape failed, with why;
    ``endpoints``: the agents' Service's endpoints by node, with ``config.service``."""

    def __init__(
        self, site: str, config: NodeMetricsConfig, owns: Callable[[NodeRecord], bool]
    ) -> None:
        self.site = site
        self.config = config
        self.owns = owns
        self.failed: dict[str, str] = {}
        self.rounds = 0
        where = config.service_port()
        self.endpoints = None if where is None else AgentEndpoints(site, *where)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, config: SingleConfig, resync_s: float) -> Informer[SliceEndpoints] | None:
        """The informer of the agents' Service's slices (not started), None: the URL template."""
        return None if self.endpoints is None else self.endpoints.watch(config, resync_s)

    def start(self, plane: ControlPlane) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(plane,), name=f"site-{self.site}-power", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.timeout_s * 2 + 5)

    def _run(self, plane: ControlPlane) -> None:
        while not self._stop.is_set():
            try:
                self.round(plane)
            except Exception:  # a round's own fault (the store): logged, the next one tries again
                log.exception("site %s: a round of node metrics failed", self.site)
            self._stop.wait(self.config.every_s)

    def round(self, plane: ControlPlane) -> int:
        """Scrape every node of the site once, at most ``in_flight`` at a time, and keep what
        they read; returns the readings kept. Without the token (its file or secret unreadable)
        no node is scraped: a token-less request would only be refused."""
        self.rounds += 1
        nodes = plane.read(
            lambda: {
                name: frozenset(
                    d.uuid for n in (rec.node, rec.target) if n is not None for d in n.devices
                )
                for name, rec in plane.node_records.items()
                if self.owns(rec)
            }
        )
        urls = self._urls(nodes)
        for name in nodes.keys() - urls.keys():
            self.failed.pop(name, None)  # no agent to ask: skipped, not failed
        if not urls:
            return 0
        try:
            token = self._token(plane)
        except ScrapeError as exc:
            log.warning("site %s: node metrics not read: %s", self.site, exc)
            return 0
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        timeout = httpx.Timeout(self.config.timeout_s)
        workers = min(self.config.in_flight, len(urls))
        limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
        kept = 0
        with (
            httpx.Client(timeout=timeout, limits=limits, headers=headers) as client,
            ThreadPoolExecutor(workers, thread_name_prefix=f"site-{self.site}-scrape") as pool,
        ):
            scrapes = {
                name: pool.submit(self._scrape, client, url, nodes[name])
                for name, url in sorted(urls.items())
            }
            for name, scrape in scrapes.items():
                try:
                    readings = scrape.result()
                except ScrapeError as exc:
                    if self.failed.get(name) is None:
                        log.warning("site %s: node %s metrics: %s", self.site, name, exc)
                    self.failed[name] = str(exc)
                    continue
                self.failed.pop(name, None)
                kept += agents.site_metrics(plane, name, readings)
        return kept

    def _urls(self, nodes: Collection[str]) -> dict[str, str]:
        """The metrics URL of each of ``nodes`` that has one now."""
        if self.endpoints is None:
            return {name: self.config.url_of(name) for name in nodes}
        found = self.endpoints.urls()
        return {name: found[name] for name in nodes if name in found}

    def _scrape(self, client: httpx.Client, url: str, cards: frozenset[str]) -> list[DeviceMetrics]:
        body = bytearray()
        try:
            with client.stream("GET", url) as answer:
                if answer.status_code != 200:
                    raise ScrapeError(f"{url}: HTTP {answer.status_code}")
                for chunk in answer.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BYTES:
                        raise ScrapeError(f"{url}: more than {MAX_BYTES} bytes")
        except httpx.HTTPError as exc:
            raise ScrapeError(f"{url}: {type(exc).__name__} {str(exc)[:200]}") from None
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise ScrapeError(f"{url}: not UTF-8 text") from None
        return parse_readings(text, cards)

    def _token(self, plane: ControlPlane) -> str | None:
        """The bearer token now (read each round: a rotated Secret takes over), None: none set."""
        config = self.config
        if config.token_file is not None:
            try:
                token = config.token_file.read_text().strip()
            except OSError as exc:
                raise ScrapeError(f"cannot read {config.token_file}: {exc.strerror}") from None
        elif config.token_secret is not None:
            try:
                token = admin_secret(plane, config.token_secret).decode().strip()
            except (NotFound, SealBrokenError, UnicodeDecodeError) as exc:
                raise ScrapeError(f"secret {config.token_secret}: {exc}") from None
        else:
            return None
        if not token:
            raise ScrapeError("the token is empty")
        return token
