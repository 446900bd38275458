"""The agent loop: read the node, register what changed, heartbeat, act on the reply.

One loop hosts one or more nodes (a standalone agent hosts its own host; the agent inside
``xpupool up`` also hosts the cluster file's simulated nodes). Per node and period: read devices
(a missing tool is logged, never fatal: the node registers with what was found), register again
only when the inventory differs from what the server last accepted, ship new log bytes, then send
one heartbeat with metrics and replica reports and start/stop what the reply says. Between
heartbeats the loop polls its processes every ``poll_s`` and heartbeats early when a replica
started or ended, so devices are freed as soon as a process is gone.

Nodes the server registered itself (the cluster file's simulated nodes: no probes, no inventory)
that run nothing cost one call per period for all of them (``idle``), not a heartbeat each: 5,000
simulated nodes idle would otherwise be 1,000 heartbeats a second (issue 25). The server answers
which of them it holds work for; those heartbeat in full, and heartbeat on their own while
they run something.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xpupool.agent import volume_usage
from xpupool.agent.monitor import Monitor, Reading, device_metrics, over_limit
from xpupool.agent.recut import Recuts
from xpupool.agent.runner import DEFAULT_LEASE_S, Runner
from xpupool.agent.transport import (
    AgentRefused,
    IdleHeartbeats,
    NodeReleased,
    Transport,
    TransportError,
)
from xpupool.model.errors import NotFound
from xpupool.probes.base import DeviceInfo
from xpupool.server.schemas.agent_protocol import (
    FINAL_REPLICA_STATES,
    Heartbeat,
    NodeIn,
    VolumeUsageReport,
)

log = logging.getLogger("xpupool.agent")


@dataclass
class HostedNode:
    """A node this agent speaks for. ``inventory`` builds its registration body from the devices
    read this pass; None means the server registers the node itself (cluster-file nodes).
    ``reading`` (the last probe pass), ``last_heartbeat`` (Unix time of the last heartbeat the
    server answered) and ``heartbeat_failures`` are what the agent's own metrics read
    (``agent/metrics.py``); each is replaced whole, never mutated, so a scrape on another thread
    sees one pass or the next."""

    name: str
    runner: Runner
    monitor: Monitor | None = None
    inventory: Callable[[list[DeviceInfo]], NodeIn] | None = None
    registered: NodeIn | None = None
    next_heartbeat: float = 0.0
    states: dict[tuple[int, int], str] = field(default_factory=dict)
    reading: Reading | None = None
    last_heartbeat: float | None = None
    heartbeat_failures: int = 0
    # the failure last logged, per kind ("register", "heartbeat"): the same one again (a server
    # that stays down, a registration it keeps refusing) is not logged again until one succeeds
    failing: dict[str, str] = field(default_factory=dict)
    next_volume_measure: float = 0.0  # when its volumes are measured next (volume_usage.py)
    recuts: Recuts | None = None  # its cards' re-cuts (recut.py); None: it re-cuts nothing


def _failed(node: HostedNode, kind: str, text: str) -> None:
    """Log ``text`` unless it is what this node's last ``kind`` failure already said."""
    if node.failing.get(kind) != text:
        node.failing[kind] = text
        log.warning("%s", text)


def _succeeded(node: HostedNode, kind: str) -> None:
    if node.failing.pop(kind, None) is not None:
        log.info("%s of %s works again", kind, node.name)


class Agent:
    def __init__(
        self,
        transport: Transport,
        nodes: list[HostedNode],
        *,
        heartbeat_s: float = 5.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        idle: IdleHeartbeats | None = None,
    ) -> None:
        self.transport = transport
        self.idle = idle  # heartbeats idle server-registered nodes together (None: each alone)
        self.next_idle_heartbeat = 0.0
        self.active: list[HostedNode] | None = None  # the nodes not idle (None: every node)
        self.idle_failing = ""  # the failure of the last idle heartbeat, logged once
        self.nodes = nodes
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self.clock = clock
        self.wall = wall  # Unix time, for last_heartbeat only (periods use ``clock``)

    # ------------------------------------------------------------------ one node, one pass
    def step(self, node: HostedNode, act: bool = True) -> None:
        """One heartbeat for ``node``; transport failures are logged and retried next period.
        ``act`` False (the last heartbeat before the agent exits) starts and stops nothing."""
        metrics = []
        if node.monitor is not None:
            runner = node.runner  # each replica's rows are checked on its own budget
            owner = node.monitor.owner_of(runner.running_groups(), node.name, runner.containers())
            reading = node.monitor.read(owner)
            node.reading = reading
            metrics = [device_metrics(d, node.monitor.warnings) for d in reading.devices]
            if node.inventory is not None:
                self._register(node, node.inventory(reading.devices))
            if reading.process_memory is not None:
                self._measure(node, reading.process_memory, reading.unmeasured)
            else:  # not measured this pass: report nothing rather than the last pass's figures
                for rep in node.runner.replicas.values():
                    rep.memory_used_mib, rep.memory_measured = {}, False
        elif node.inventory is not None:
            self._register(node, node.inventory([]))
        if node.inventory is not None and node.registered is None:
            node.heartbeat_failures += 1  # no heartbeat this period either
            return  # not registered yet: the server would answer 404
        node.runner.poll()
        try:  # a chunk the server did not take is sent again next time
            node.runner.ship_logs(
                lambda job, rep, chunk, offset, attempt: self._send_log(
                    node, job, rep, chunk, offset, attempt
                )
            )
        except TransportError as exc:
            _failed(node, "log upload", f"log upload of {node.name} failed: {exc}")
        else:
            _succeeded(node, "log upload")
        reports = node.runner.reports()
        sent = time.monotonic()  # the lease's clock: CLOCK_MONOTONIC, shared with supervisors
        try:
            body = Heartbeat(
                node=node.name,
                metrics=metrics,
                replicas=reports,
                starting=node.runner.starting_reports(),
                volumes=self._volumes(node),
                recut_failed=list(node.recuts.failures) if node.recuts is not None else [],
            )
            reply = self.transport.heartbeat(body)
        except NotFound:
            log.warning("server does not know node %s: registering again", node.name)
            node.registered = None
            node.heartbeat_failures += 1
            return
        except TransportError as exc:
            _failed(node, "heartbeat", f"heartbeat of {node.name} failed: {exc}")
            node.heartbeat_failures += 1
            return
        _succeeded(node, "heartbeat")
        node.last_heartbeat = self.wall()
        # answered: the server saw this heartbeat at or after ``sent``, so a lease counted from
        # ``sent`` never outlives what it believes
        node.runner.renew(sent + (reply.lease_s or DEFAULT_LEASE_S), reply.lease_grace_s)
        node.runner.acknowledge(reports)
        self.heartbeat_s = reply.heartbeat_s
        if node.recuts is not None:
            node.recuts.sent(body.recut_failed)
        if not act:
            return
        for job_id, replica in reply.stop:
            node.runner.stop(job_id, replica)
        for work in reply.run:
            node.runner.start(work)
        if node.recuts is not None and node.reading is not None:
            node.recuts.act(reply.recut, node.reading.devices, node.runner.given_devices())

    def _volumes(self, node: HostedNode) -> list[VolumeUsageReport] | None:
        """What ``node``'s volumes hold, when their measure is due (None otherwise)."""
        dirs = node.runner.volume_dirs
        now = self.clock()
        if not dirs or now < node.next_volume_measure:
            return None
        node.next_volume_measure = now + volume_usage.EVERY_S
        out = []
        for (name, tenant), path in sorted(dirs.items(), key=lambda kv: kv[0][0])[:64]:
            m = volume_usage.measure(path)
            out.append(
                VolumeUsageReport(name=name, tenant=tenant, bytes=m.bytes, complete=m.complete)
            )
        return out

    def forget_copies(self, job_id: int) -> None:
        """Remove every hosted node's copies of job ``job_id``'s finished logs."""
        for node in self.nodes:
            node.runner.forget_copies(job_id)

    def _register(self, node: HostedNode, body: NodeIn) -> None:
        if body == node.registered:
            return
        try:
            self.transport.register(body)
        except (TransportError, NotFound) as exc:
            _failed(node, "register", f"registration of {node.name} failed: {exc}")
            return
        _succeeded(node, "register")
        what = "registered" if node.registered is None else "inventory changed, registered again"
        log.info("%s %s: %d devices", node.name, what, len(body.devices))
        node.registered = body
        node.runner.node_vendors = tuple(sorted({d.vendor for d in body.devices}))

    def _measure(
        self,
        node: HostedNode,
        usage: dict[str, dict[int, int]],
        unmeasured: dict[tuple[int, int], set[str]],
    ) -> None:
        assert node.monitor is not None
        per_replica = node.monitor.replica_usage(
            node.runner.running_groups(), usage, node.name, node.runner.containers()
        )
        shares, lost = node.monitor.shares, node.monitor.unmeasured
        if shares is not None:
            shares.keep(per_replica)
        if lost is not None:
            lost.keep(per_replica)
        for key, used in per_replica.items():
            rep = node.runner.replicas[key]
            rep.memory_used_mib, rep.memory_measured = used, True
            if rep.flag.startswith("stopped: "):
                continue  # said once; its supervisor is stopping it
            flag = over_limit(rep.work, used)
            why = shares.check(key, rep.work, used) if shares is not None else ""
            gone = lost.check(key, unmeasured.get(key, set())) if lost is not None else ""
            if gone and not why and lost is not None and lost.stop:  # agent/unmeasured.py
                why = gone
            elif gone and not flag:
                flag = f"not measured: {gone}"
            if why and not rep.stop_requested:  # watch and stop (agent/share_watch.py)
                log.warning("job %d replica %d on %s: stopped: %s", *key, node.name, why)
                flag = f"stopped: {why}"
                rep.stopped_for = why
                node.runner.stop(*key)
            elif flag and flag != rep.flag:
                log.warning("job %d replica %d on %s: %s", *key, node.name, flag)
            rep.flag = flag

    def _send_log(
        self, node: HostedNode, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        # NotFound: the server no longer holds that replica here; nobody will read these bytes
        with contextlib.suppress(NotFound):
            self.transport.append_log(node.name, job_id, replica, chunk, offset, attempt)

    @staticmethod
    def _states(node: HostedNode) -> dict[tuple[int, int], str]:
        return {
            key: "starting" if rep.starting else rep.state
            for key, rep in node.runner.replicas.items()
        }

    # ------------------------------------------------------------------ the loop
    def tick(self) -> None:
        """Heartbeat the idle nodes together when their period is up; poll every other node's
        processes and heartbeat those that are due or whose replicas changed. Which nodes are
        idle is asked once per period: only a heartbeat hands an idle node work, so between
        two periods the idle ones cost nothing, however many."""
        now = self.clock()
        if self.idle is not None and now >= self.next_idle_heartbeat:
            self._beat_idle([n for n in self.nodes if self._quiet(n)])
            self.active = [n for n in self.nodes if not self._quiet(n)]
        for node in list(self.nodes if self.active is None else self.active):
            node.runner.poll()
            changed = self._states(node) != node.states
            if changed or now >= node.next_heartbeat:
                self._beat(node)

    def _quiet(self, node: HostedNode) -> bool:
        """True for a node that may heartbeat with the other idle ones: registered by the
        server (nothing to read or register), running nothing, and told nothing yet."""
        return (
            self.idle is not None
            and node.monitor is None
            and node.inventory is None
            and node.runner.idle
            and not node.states
        )

    def _beat(self, node: HostedNode) -> None:
        """One heartbeat of ``node`` (``step``); its failures stay its own."""
        try:
            self.step(node)
        except AgentRefused:
            raise  # retrying cannot help: the agent stops and says why
        except NodeReleased as exc:
            self._release(node, exc)
            return
        except Exception:  # one node's bug must not stop the others
            log.exception("agent step for %s failed", node.name)
        node.states = self._states(node)
        node.next_heartbeat = self.clock() + self.heartbeat_s

    def _beat_idle(self, quiet: list[HostedNode]) -> None:
        """One heartbeat for every node of ``quiet``; those the server has work for (or
        something else to say to) then heartbeat on their own."""
        assert self.idle is not None
        self.next_idle_heartbeat = self.clock() + self.heartbeat_s
        if not quiet:
            return
        try:
            own = self.idle.heartbeat_idle([n.name for n in quiet])
        except TransportError as exc:
            if str(exc) != self.idle_failing:
                self.idle_failing = str(exc)
                log.warning("heartbeat of %d idle nodes failed: %s", len(quiet), exc)
            return
        if self.idle_failing:
            self.idle_failing = ""
            log.info("heartbeat of idle nodes works again")
        wall = self.wall()
        for node in quiet:
            if node.name in own:
                self._beat(node)
            else:
                node.last_heartbeat = wall

    def _release(self, node: HostedNode, exc: NodeReleased) -> None:
        """Let go of ``node``: the server gives it to no one through this agent any more. What
        still runs there is stopped (its devices are no longer this agent's to use)."""
        log.warning("%s: stopping its replicas here and hosting it no more", exc)
        node.runner.shutdown()
        self.nodes.remove(node)
        if self.active is not None and node in self.active:
            self.active.remove(node)

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set, then leave (:meth:`close`). :class:`AgentRefused` ends the
        loop the same way, then propagates."""
        try:
            while not stop.is_set():
                self.tick()
                stop.wait(self.poll_s)
        finally:
            self.close()

    def close(self) -> None:
        """A graceful stop: running replicas keep running under their supervisors (their leases
        run out unless an agent comes back within them) and nothing is reported that ends them;
        replicas that did end are reported in a last heartbeat."""
        for node in self.nodes:
            node.runner.poll()
            if any(rep.state in FINAL_REPLICA_STATES for rep in node.runner.replicas.values()):
                try:
                    self.step(node, act=False)
                except Exception as exc:
                    log.info("last heartbeat of %s not delivered: %s", node.name, exc)
