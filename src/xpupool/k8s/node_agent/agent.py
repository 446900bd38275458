"""The Kubernetes node agent (the DaemonSet's one process): probe this node's devices and keep
them, with a heartbeat, in the Node's annotations.

Each pass reads the same probes the embedded agent reads (``agent/monitor.py``), turns the
devices into the one wire form (``agent/inventory.device_in``, ``k8s/codec/node_annotations.py``) and
patches the Node with only the annotations whose text changed: the heartbeat every pass, the
devices when they changed. The patch is a JSON merge patch carrying the resourceVersion the agent
read, so the apiserver refuses it (409) when anyone wrote the Node in between; the agent then
reads the Node again and retries, a bounded number of times, so nothing it did not mean to write
is ever overwritten and a busy Node cannot hold it in a loop. Failures are logged and counted and
the next pass tries again: the agent never exits on an apiserver error, only on SIGTERM.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

import httpx2
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xpupool.agent.inventory import device_in
from xpupool.agent.metrics import device_families
from xpupool.agent.monitor import Monitor, Reading
from xpupool.k8s.codec.node_annotations import (
    DEVICES_KEY,
    HEARTBEAT_KEY,
    encode_devices,
    encode_heartbeat,
)
from xpupool.model.errors import XpupoolError
from xpupool.probes.base import DeviceInfo

log = logging.getLogger("xpupool.k8s.agent")

FIELD_MANAGER = "xpupool-node-agent"
DEFAULT_ATTEMPTS = 5  # reads + patches per pass when others keep writing the Node
# Extra annotations from the probed devices, e.g. HAMi's register format (``--hami-register``).
ExtraAnnotations = Callable[[Sequence[DeviceInfo]], Mapping[str, str]]


class NodeAgentError(XpupoolError):
    """A pass could not write the Node; the message says why. The loop logs it and goes on."""


def now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class AgentStats:
    """What the agent did, for its metrics and for tests; only the agent's thread writes it."""

    passes: int = 0
    patches: int = 0  # patch requests the apiserver accepted
    conflicts: int = 0  # patches refused with 409 (someone wrote the Node in between)
    failures: int = 0  # passes that ended without the Node written
    writes: dict[str, int] = field(default_factory=dict)  # annotation key -> accepted writes
    last_heartbeat: float | None = None  # Unix time of the last heartbeat the apiserver took


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: the annotation keys written (empty: the Node already said it all) and the
    number of reads of the Node it took."""

    written: tuple[str, ...]
    attempts: int


class NodeAgent:
    """Writes ``node_name``'s annotations through ``client`` from ``monitor``'s readings.

    ``extra`` adds annotations computed from the devices (the hook ``--hami-register`` fills);
    ``extra_keys`` are every key ``extra`` may write: one it no longer writes (the node's last
    card of that type is gone) is deleted from the Node, so no scheduler keeps placing on cards
    that left. ``clock`` gives the heartbeat time; ``max_attempts`` bounds the re-reads after
    conflicts.
    """

    def __init__(
        self,
        client: Client,
        node_name: str,
        monitor: Monitor,
        *,
        extra: ExtraAnnotations | None = None,
        extra_keys: frozenset[str] = frozenset(),
        clock: Callable[[], datetime] = now_utc,
        max_attempts: int = DEFAULT_ATTEMPTS,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.client = client
        self.node_name = node_name
        self.monitor = monitor
        self.extra = extra
        self.extra_keys = extra_keys
        self.clock = clock
        self.max_attempts = max_attempts
        self.reading: Reading | None = None  # the last probe pass, replaced whole (metrics)
        self.stats = AgentStats()

    def desired(self, reading: Reading, at: datetime) -> dict[str, str]:
        """The annotations this node should carry after a pass that read ``reading`` at ``at``
        (of :attr:`extra_keys`, those left out are deleted).

        Raises ``RequestError`` when the devices do not fit in an annotation."""
        devices = [x for x in (device_in(d) for d in reading.devices) if x is not None]
        out = {DEVICES_KEY: encode_devices(devices), HEARTBEAT_KEY: encode_heartbeat(at)}
        if self.extra is not None:
            out.update(self.extra(reading.devices))
        return out

    def sync(self) -> PassResult:
        """One pass: probe, then write what changed. Raises ``NodeAgentError`` when the Node
        cannot be read or written (apiserver error, policy refusal, conflicts past the bound)."""
        self.stats.passes += 1
        try:
            reading = self.monitor.read()
            self.reading = reading
            at = self.clock()
            want = self.desired(reading, at)
            result = self._write(want)
        except NodeAgentError:
            self.stats.failures += 1
            raise
        except XpupoolError as exc:
            self.stats.failures += 1
            raise NodeAgentError(f"node {self.node_name}: {exc}") from exc
        if HEARTBEAT_KEY in result.written:
            self.stats.last_heartbeat = at.timestamp()
        return result

    def _write(self, want: Mapping[str, str]) -> PassResult:
        for attempt in range(1, self.max_attempts + 1):
            node = self._call("read", partial(self.client.get, Node, name=self.node_name))
            meta = node.metadata
            have = (meta.annotations if meta is not None else None) or {}
            changed: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
            changed.update((k, None) for k in self.extra_keys if k in have and k not in want)
            if not changed:
                return PassResult((), attempt)
            rv = meta.resourceVersion if meta is not None else None
            patch = {"metadata": {"resourceVersion": rv, "annotations": changed}}
            try:
                self._call(
                    "patch",
                    partial(
                        self.client.patch, Node, self.node_name, patch, patch_type=PatchType.MERGE
                    ),
                    conflict_ok=True,
                )
            except _ConflictError:
                self.stats.conflicts += 1
                log.info(
                    "node %s changed since it was read (409): reading it again", self.node_name
                )
                continue
            self.stats.patches += 1
            for key in changed:
                self.stats.writes[key] = self.stats.writes.get(key, 0) + 1
            return PassResult(tuple(sorted(changed)), attempt)
        raise NodeAgentError(
            f"node {self.node_name}: still changed by others after {self.max_attempts} "
            "read-patch attempts (409 each time); next pass tries again"
        )

    def _call(self, verb: str, fn: Callable[[], Node], *, conflict_ok: bool = False) -> Node:
        """``fn()`` with the apiserver's refusals as ``NodeAgentError`` (a 409 as ``_ConflictError``
        where the caller retries it)."""
        try:
            return fn()
        except ApiError as exc:
            code = exc.status.code if exc.status is not None else None
            if conflict_ok and code == 409:
                raise _ConflictError from None
            reason = exc.status.message if exc.status is not None else str(exc)
            raise NodeAgentError(f"{verb} node {self.node_name}: HTTP {code}: {reason}") from None
        except httpx2.HTTPError as exc:
            raise NodeAgentError(f"{verb} node {self.node_name}: {exc!r}") from None

    def run(self, stop: threading.Event, interval_s: float) -> None:
        """A pass every ``interval_s`` seconds until ``stop`` is set; the first at once. Errors
        are logged (each distinct one once in a row) and never end the loop."""
        last_error = ""
        while not stop.is_set():
            try:
                result = self.sync()
            except NodeAgentError as exc:
                if str(exc) != last_error:
                    log.warning("%s", exc)
                last_error = str(exc)
            else:
                if last_error:
                    log.info("node %s written again", self.node_name)
                last_error = ""
                if set(result.written) - {HEARTBEAT_KEY}:
                    log.info("node %s: wrote %s", self.node_name, ", ".join(result.written))
            stop.wait(interval_s)


class _ConflictError(Exception):
    """A 409 on a resourceVersion-guarded patch."""


class NodeAgentCollector(Collector):
    """The node's device gauges (the same families as ``xpupool agent``'s) and what the agent
    did to the Node. Reads ``agent.reading``, which each pass replaces whole."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        yield from device_families([(a.node_name, a.reading)])
        s = a.stats
        node = [a.node_name]

        def counter(name: str, text: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"xpupool_node_agent_{name}", text, labels=["node"])
            c.add_metric(node, value)
            return c

        yield counter("passes", "Probe-and-write passes.", s.passes)
        yield counter("patches", "Node patches the apiserver accepted.", s.patches)
        yield counter("conflicts", "Node patches refused with 409 and retried.", s.conflicts)
        yield counter("failures", "Passes that left the Node unwritten.", s.failures)
        writes = CounterMetricFamily(
            "xpupool_node_agent_annotation_writes",
            "Accepted writes per annotation key.",
            labels=["node", "annotation"],
        )
        for key, count in sorted(s.writes.items()):
            writes.add_metric([a.node_name, key], count)
        yield writes
        if s.last_heartbeat is not None:
            seen = GaugeMetricFamily(
                "xpupool_node_agent_last_heartbeat_timestamp_seconds",
                "Unix time of the last heartbeat written to the Node.",
                labels=["node"],
            )
            seen.add_metric(node, s.last_heartbeat)
            yield seen


def make_registry(agent: NodeAgent) -> CollectorRegistry:
    """A registry of its own (no process collectors; tests run several agents in one process)."""
    registry = CollectorRegistry()
    registry.register(NodeAgentCollector(agent))
    return registry
