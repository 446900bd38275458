"""Today's pool of ``xpupool agent`` nodes (and the cluster file's simulated ones) as a site.

Agents pull: each heartbeat's reply says what the node must run and stop
(``services/agents.py``), so starting and stopping work here means keeping, per node, the book of
jobs that node must hear about, which the reply reads: the jobs :meth:`AgentPoolSite.start`
placed there, those :meth:`AgentPoolSite.stop` stops there, and those the plane read back from the
store (:meth:`AgentPoolSite.adopt`). An entry stays until the job holds nothing on the node any
more (read from the plane's held jobs: the one truth), so a reply walks the node's own jobs, not
every held job. The node ``site`` label that agents and the cluster file carry names sites *of
this pool* for placement (``site=`` in a request); it is not a :class:`Site` of the registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from xpupool.engine.host import HostedNode
from xpupool.engine.link_domains import labelled
from xpupool.server.schemas.nodes import NodeStatus

if TYPE_CHECKING:
    from xpupool.model.allocation import Allocation
    from xpupool.server.plane.records import HeldJob, NodeRecord
    from xpupool.server.sites.protocol import Sites

AGENT_POOL = "agents"  # the agent pool's name in the registry
SOURCES = frozenset({"agent", "cluster"})  # the node sources that are the agent pool's


class AgentPoolSite:
    """The agent pool behind :class:`~xpupool.server.sites.protocol.Site`."""

    def __init__(self, name: str = AGENT_POOL, link_domain_label: str | None = None) -> None:
        self._name = name
        # the node label (agents' ``--label``) whose value is a node's link domain: a gang is
        # kept to one (the sites file's ``agents.link_domain_label``); None: none
        self.link_domain_label = link_domain_label
        # node -> ids of the jobs it must hear about, in the order they came (dict as ordered set)
        self._book: dict[str, dict[int, None]] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def kind(self) -> str:
        return "agents"

    def owns(self, record: NodeRecord) -> bool:
        """Nodes agents registered (``agent``) and the cluster file's (``cluster``), whose agent
        is the one inside ``xpupool up``."""
        return record.source in SOURCES

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        """A cordoned or lost node takes no new work; its cordoned and draining cards neither.
        Each node is in the link domain :attr:`link_domain_label` names
        (``engine/link_domains.py``)."""
        label = self.link_domain_label
        for rec in records:
            yield HostedNode(
                labelled(rec.node, label),
                not (rec.cordoned or rec.status is NodeStatus.LOST),
                frozenset(rec.cordoned_devices | rec.draining),
            )

    def start(self, job: HeldJob) -> bool:
        """Each node of ``job`` hands its replicas out at its next heartbeat (which marks them
        handed: until then a stop releases the job at once)."""
        self._enter(job)
        return False

    def stop(self, job: HeldJob) -> None:
        """Each node of ``job`` is told to stop its replicas at its next heartbeat (the reply
        reads the job's stop); already in the book if it was started, entered again if not."""
        self._enter(job)

    def adopt(self, jobs: Iterable[HeldJob]) -> None:
        """The book again from the plane's held jobs, as read back from the store."""
        self._book = {}
        for job in jobs:
            self._enter(job)

    def foreign(self) -> Mapping[str, Sequence[Allocation]]:
        """None: an agent node runs the plane's jobs only."""
        return {}

    def _enter(self, job: HeldJob) -> None:
        for a in job.allocations:
            self._book.setdefault(a.node, {})[job.id] = None

    def on_node(
        self, record: NodeRecord, held: Mapping[int, HeldJob]
    ) -> list[tuple[HeldJob, Allocation]]:
        """(job, allocation) of every allocation ``held`` (the plane's held jobs) has on node
        ``record``: what its heartbeat's reply runs or stops; none on another site's node (a job
        across sites is entered on all its nodes: each site runs its own part). Entries of jobs
        that hold nothing there any more (released, requeued) leave the book here."""
        if not self.owns(record):
            return []
        node = record.node.name
        ids = self._book.get(node)
        if not ids:
            return []
        out: list[tuple[HeldJob, Allocation]] = []
        gone: list[int] = []
        for job_id in ids:
            job = held.get(job_id)
            here = [] if job is None else [a for a in job.allocations if a.node == node]
            if not here:
                gone.append(job_id)
            out.extend((job, a) for a in here if job is not None)
        for job_id in gone:
            del ids[job_id]
        if not ids:
            del self._book[node]
        return out

    def busy(self, nodes: Iterable[str], held: Mapping[int, HeldJob]) -> set[str]:
        """Those of ``nodes`` holding an allocation of ``held``: their heartbeats must report
        replica states, so they are not beaten as idle (``services/agents.heartbeat_idle``)."""
        return {n for n in nodes if n in self._book and self._holds(n, held)}

    def _holds(self, node: str, held: Mapping[int, HeldJob]) -> bool:
        ids = self._book.get(node, {})
        return any(a.node == node for i in ids if (j := held.get(i)) for a in j.allocations)


def agent_pool(sites: Sites) -> AgentPoolSite:
    """The registry's agent pool, which the agent protocol's services work on."""
    site = sites[AGENT_POOL]
    assert isinstance(site, AgentPoolSite), f"site {AGENT_POOL} is not the agent pool"
    return site
