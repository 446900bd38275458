"""The agent inside ``xpupool up``: the local host plus the cluster file's simulated nodes.

It calls the plane's agent services directly instead of going over HTTP to its own port: the same
functions the HTTP routes call, without a token to mint, a port to wait for, or JSON in between;
the loop, the runner and the reports are the code a standalone agent runs, so what the embedded
plane shows is what a fleet would do. The local host registers with its real probes (a CPU-only
host registers with no devices). Simulated nodes are registered by the server from the cluster
file; the agent heartbeats for them and runs their replicas as local processes with the simulated
device indices and UUIDs in the vendor variables (DESIGN.md section 2). Simulated nodes are never
marked lost (the lost-node watch only looks at agent-registered nodes): their agent is this
process, and if it stops, so does the server.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from xpupool.agent.agent import Agent, HostedNode
from xpupool.agent.inventory import node_in, node_name
from xpupool.agent.monitor import Monitor
from xpupool.agent.runner import Runner
from xpupool.probes import Probe, host_probes
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas import Heartbeat, HeartbeatReply, NodeIn
from xpupool.server.services import agents, fleet

log = logging.getLogger("xpupool.agent")


class PlaneTransport:
    """The agent protocol as direct calls on the plane (NotFound passes through unchanged)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def register(self, node: NodeIn) -> None:
        fleet.register(self.plane, node)

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        return agents.heartbeat(self.plane, body)

    def append_log(self, node: str, job_id: int, replica: int, chunk: bytes) -> None:
        agents.append_log(self.plane, node, job_id, replica, chunk)


def local_agent(
    plane: ControlPlane,
    work_dir: Path,
    *,
    probes: list[Probe] | None = None,
    host: str | None = None,
    grace_s: float = 10.0,
    poll_s: float = 0.2,
) -> Agent:
    """An agent hosting this host (``probes``: the vendor probes by default) and every
    cluster-file node the plane knows."""
    simulated = [name for name, rec in plane.nodes.items() if rec.source == "cluster"]
    name = node_name(host)
    if name in simulated:
        name = node_name(f"{name}-local")
    found = host_probes() if probes is None else probes
    nodes = [
        HostedNode(
            name=name,
            runner=Runner(name, work_dir / name, grace_s=grace_s),
            monitor=Monitor(found),
            inventory=lambda devices: node_in(name, devices, labels={"xpupool/local": "true"}),
        )
    ]
    for sim in simulated:
        vendors = sorted({d.vendor for d in plane.nodes[sim].node.devices})
        runner = Runner(sim, work_dir / sim, grace_s=grace_s, node_vendors=vendors)
        nodes.append(HostedNode(name=sim, runner=runner))
    return Agent(PlaneTransport(plane), nodes, heartbeat_s=plane.heartbeat_s, poll_s=poll_s)


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
