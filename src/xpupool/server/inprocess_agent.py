"""The agent inside ``xpupool up``: the local host plus the cluster file's simulated nodes.

It calls the plane's agent services directly instead of going over HTTP to its own port: the same
functions the HTTP routes call, without a token to mint, a port to wait for, or JSON in between;
the loop, the runner and the reports are the code a standalone agent runs, so what the embedded
plane shows is what a fleet would do. The local host registers with its real probes (a CPU-only
host registers with no devices). Simulated nodes are registered by the server from the cluster
file; the agent heartbeats for them and runs their replicas as local processes with the simulated
device indices and UUIDs in the vendor variables (DESIGN.md section 2); while they run nothing,
one call per period heartbeats for all of them (``heartbeat_idle``). Simulated nodes are never
marked lost (the lost-node watch only looks at agent-registered nodes): their agent is this
process, and if it stops, so does the server. The direct calls go through the same node checks
as HTTP, as a principal that speaks for the hosted nodes only (``in_process_principal``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import cast

from xpupool.agent.agent import Agent, HostedNode
from xpupool.agent.inventory import node_in, node_name
from xpupool.agent.launch import LaunchSettings
from xpupool.agent.monitor import Monitor
from xpupool.agent.recut import Recuts, chip_locator
from xpupool.agent.runner import Runner
from xpupool.agent.transport import NodeReleased, TransportError
from xpupool.model.errors import Conflict, Forbidden, RequestError, Unavailable, XpupoolError
from xpupool.probes import Probe, host_probes
from xpupool.probes.container_runtime import RuntimeName, detect_runtime
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.agent_protocol import ADDRESS_LABEL, Heartbeat, HeartbeatReply, NodeIn
from xpupool.server.services import node_identity
from xpupool.server.services.node_identity import in_process_principal

log = logging.getLogger("xpupool.agent")


class PlaneTransport:
    """The agent protocol as direct calls on the plane, as ``who``: the same node checks as an
    HTTP agent's (``services/node_identity.py``), for the nodes this agent hosts and no other.
    A refusal is written to the audit log, as the HTTP front does, then raised (NotFound passes
    through unchanged); a node the admin deleted or took over is :class:`NodeReleased`."""

    def __init__(self, plane: ControlPlane, who: Principal) -> None:
        self.plane = plane
        self.who = who

    def _refused(self, action: str, node: str, exc: XpupoolError) -> None:
        if isinstance(exc, Forbidden) and self.plane.is_released(node):
            raise NodeReleased(node, str(exc)) from None  # the admin's doing: no refusal row
        status = 403 if isinstance(exc, Forbidden) else 422
        self.plane.audit.record(self.who, action, f"node {node}", status, str(exc))

    def register(self, node: NodeIn) -> None:
        try:
            node_identity.register(self.plane, self.who, node)
        except (Forbidden, RequestError) as exc:
            self._refused("register", node.name, exc)
            raise
        except (Conflict, Unavailable) as exc:  # as an HTTP agent sees a 409 or a 503
            raise TransportError(str(exc)) from None
        self.plane.audit.record(self.who, "register", f"node {node.name}", 200, "ok")

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        try:
            return node_identity.heartbeat(self.plane, self.who, body)
        except (Forbidden, RequestError) as exc:
            self._refused("heartbeat", body.node, exc)
            raise
        except Unavailable as exc:  # the store cannot be written: as a 503 over HTTP
            raise TransportError(str(exc)) from None

    def heartbeat_idle(self, nodes: list[str]) -> set[str]:
        try:
            return node_identity.heartbeat_idle(self.plane, self.who, nodes)
        except Unavailable as exc:
            raise TransportError(str(exc)) from None

    def append_log(
        self, node: str, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        try:
            node_identity.append_log(
                self.plane, self.who, node, job_id, replica, chunk, offset, attempt
            )
        except Forbidden as exc:
            self._refused("append_log", node, exc)
            raise
        except Unavailable as exc:
            raise TransportError(str(exc)) from None


def declared_runtime(settings: LaunchSettings, declared: str | None) -> LaunchSettings:
    """A cluster-file node's launch settings: the runtime its file declares (``runtime:``), not
    the host's. Whether it reads CDI names is asked of the runtime; one that does not answer is
    still used as declared (its image jobs then fail with the runtime's own error) and logged."""
    if declared is None or declared == settings.runtime:
        return replace(settings, runtime=declared)
    found = detect_runtime(cast(RuntimeName, declared))
    if found.runtime is None:
        log.warning("cluster node runtime %s does not answer: %s", declared, found.describe())
    cdi = found.runtime.cdi if found.runtime is not None else False
    return replace(settings, runtime=declared, runtime_cdi=cdi)


def local_agent(
    plane: ControlPlane,
    work_dir: Path,
    *,
    probes: list[Probe] | None = None,
    host: str | None = None,
    grace_s: float = 10.0,
    poll_s: float = 0.2,
    settings: LaunchSettings | None = None,
) -> Agent:
    """An agent hosting this host (``probes``: the vendor probes by default) and every
    cluster-file node the plane knows; ``settings``: how its replicas are launched (the same
    spec and back ends as a standalone agent's)."""
    simulated = [name for name, rec in plane.node_records.items() if rec.source == "cluster"]
    name = node_name(host)
    if name in simulated:
        name = node_name(f"{name}-local")
    found = host_probes() if probes is None else probes
    settings = settings or LaunchSettings()
    runtime = settings.runtime
    nodes = [
        HostedNode(
            name=name,
            runner=Runner(name, work_dir / name, grace_s=grace_s, settings=settings),
            monitor=Monitor(found, dev_root=settings.device_root),
            inventory=lambda devices: node_in(
                name,
                devices,
                labels={"xpupool/local": "true", ADDRESS_LABEL: "127.0.0.1"},
                runtime=runtime,
                drain=True,
            ),
            recuts=Recuts(chip_locator(found)),
        )
    ]
    for sim in simulated:
        vendors = sorted({d.vendor for d in plane.node_records[sim].node.devices})
        declared = plane.node_records[sim].node.container_runtime
        runner = Runner(
            sim,
            work_dir / sim,
            grace_s=grace_s,
            settings=declared_runtime(settings, declared),
            node_vendors=vendors,
        )
        nodes.append(HostedNode(name=sim, runner=runner))
    who = in_process_principal(n.name for n in nodes)
    transport = PlaneTransport(plane, who)
    return Agent(transport, nodes, heartbeat_s=plane.heartbeat_s, poll_s=poll_s, idle=transport)


class AgentThread:
    """Runs an agent loop in a daemon thread; ``stop`` stops its replicas and waits."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=agent.run, args=(self.stopped,), name="xpupool-agent", daemon=True
        )

    def start(self) -> None:
        names = ", ".join(n.name for n in self.agent.nodes)
        log.info("in-process agent for %s", names)
        self.thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self.stopped.set()
        self.thread.join(timeout_s)
