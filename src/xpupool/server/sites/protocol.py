"""What a site implements, and the registry of sites the plane holds.

A site is a place whose nodes the plane schedules on and whose work it starts and stops: today a
pool of ``xpupool agent`` nodes (``agent_pool.py``), next a Kubernetes cluster (``k8s/``, issue
49), then several of each (issue 51). The plane keeps the one node book (``plane/nodes.py``) and
the one engine over every site's nodes; a site says which records of that book are its own, turns
them into what the engine host takes, and carries the scheduler's start and stop decisions to
where the work runs. Its nodes reach the book through the plane's registration services
(``services/fleet.py``: one node as an agent registers, or many at once as the cluster file and a
site's watch of its nodes do); replica states come back as the agent protocol's
:class:`~xpupool.server.schemas.agent_protocol.ReplicaReport` through the same heartbeat service,
whatever the site (``services/agents.py``), so a job's lifecycle does not depend on where it runs.

The operations are typed in the plane's own types (``NodeRecord``, ``HeldJob``, the engine
host's ``HostedNode``), never in a site's wire types, so that ``server/`` imports no site's
package and a site's package imports the plane, not the other way round.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from xpupool.model.errors import RequestError

if TYPE_CHECKING:
    from xpupool.engine.host import HostedNode
    from xpupool.model.allocation import Allocation
    from xpupool.server.plane.records import HeldJob, NodeRecord


@runtime_checkable
class Site(Protocol):
    """One site of the plane. Every method is called under the plane's lock (the plane's
    thread-safety covers the site's own books), and none may block on the network: a site that
    acts elsewhere (a Kubernetes API server) queues the action and performs it from its own
    thread, idempotently (issue 49's pods have names derived from job, replica and attempt)."""

    @property
    def name(self) -> str:
        """The site's name: the registry's key, unique in the plane."""
        ...

    @property
    def kind(self) -> str:
        """What the site is (``agents``, ``kubernetes``): shown by ``xpupool sites`` later, and
        how configuration files name the implementation."""
        ...

    def owns(self, record: NodeRecord) -> bool:
        """Whether node ``record`` of the plane's book is this site's. Asked by the registry to
        route a node to its site (the engine's node listing, start, stop); exactly one site owns
        each node."""
        ...

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        """``records`` (all this site's) as the engine host takes them: the node, whether new
        work may go there, the cards no new work may take. Called by
        :meth:`~xpupool.server.plane.ControlPlane.build` whenever the engine is built: the site
        decides what its nodes' states mean for placement (an agent node lost or cordoned takes
        nothing; a Kubernetes node's ``unschedulable`` is read by its site)."""
        ...

    def start(self, job: HeldJob) -> bool:
        """The scheduler placed ``job`` and some of its allocations are on this site's nodes
        (called by ``scheduler_loop`` in the transaction that records the placement): run its
        replicas there. The job's allocations say which replica goes where. Returns whether its
        replicas may be running from now on (a site that pushes work: a stop must then wait for
        the site to report them ended); False for a site whose nodes pull, which marks each
        replica handed when a node takes it (the agent pool)."""
        ...

    def stop(self, job: HeldJob) -> None:
        """The plane decided to stop ``job``, which may be running on this site's nodes
        (preempted, cancelled, over its run time, a sibling replica failed; called by
        ``ControlPlane.apply`` as the stop is recorded): stop its replicas there. The job's
        devices stay held until the site reports its replicas in a final state."""
        ...

    def adopt(self, jobs: Iterable[HeldJob]) -> None:
        """The plane read its books from the store (its start, or a reload after a failed
        write): ``jobs`` are the held jobs with allocations on this site's nodes, some running
        since before. The site takes them as its own again without starting any twice (the
        agent pool adopts what its agents report; a Kubernetes site matches its pods by
        label)."""
        ...

    def foreign(self) -> Mapping[str, Sequence[Allocation]]:
        """What this site's nodes hold for work that is no job of the plane's, by holder (a
        name that says whose it is: ``pod NAMESPACE/NAME``): cards (and host CPU and memory)
        another scheduler's pods, a HAMi user's or a system pod hold. Read by
        :meth:`~xpupool.server.plane.ControlPlane.build` whenever the engine is built, which
        charges them to nobody's quota: they take capacity, so placement and a pending job's
        reason see them. A site tells the plane of each change as it sees it
        (``server/plane/foreign_use.py``). The agent pool has none: its nodes run the plane's
        jobs only."""
        ...


@runtime_checkable
class ActiveSite(Protocol):
    """A site with threads of its own (a Kubernetes site's watches and worker), which reach the
    plane through its services: ``xpupool up`` attaches it once the plane has read its books,
    and detaches it as the server stops. Its nodes run container images only (a kubelet runs
    a pod's image, never a host command), so a job without an image naming it is refused at
    submission (``services/jobs.py``)."""

    @property
    def name(self) -> str: ...

    def attach(self, plane: Any) -> None:
        """Start watching and acting for ``plane`` (the ``ControlPlane``: typed ``Any`` here
        because the plane imports this module, tests/unit/engine/test_import_graph.py)."""
        ...

    def detach(self) -> None:
        """Stop its threads; what they had queued is the next plane's to adopt."""
        ...


@runtime_checkable
class SecretReader(Protocol):
    """A site whose credentials are one of the admin's own secrets (a Kubernetes site's
    ``kubeconfig_secret``): told when the admin sets a secret again, it takes the new value
    without a restart."""

    def secret_changed(self, name: str) -> None:
        """The admin's secret ``name`` was set (called as it is stored, under no lock of the
        plane's): a site reading it reads it again, on its own thread."""
        ...


@runtime_checkable
class WatchedSite(Protocol):
    """A site the plane hears through its watches of an API server (a Kubernetes site) rather
    than through its nodes' heartbeats: while the server answers, the nodes it lists are heard
    (``site_health.hear``); while it does not, they go silent, and are lost past the plane's
    ``lost_after_s`` by the rule an agent's silent node follows, so the site is unreachable by
    the same rule (``site_health.py``)."""

    def answering(self) -> Collection[str] | None:
        """The names of its nodes its API server lists now, while it answers the site's
        watches; None while it has not answered them since they last failed. Called under the
        plane's lock: reads the watches' state, never the network."""
        ...


class UnknownSiteError(RequestError):
    """A node no registered site owns: a configuration error (a site removed from the sites
    file while the store still has its nodes), refused naming the node."""

    def __init__(self, node: str) -> None:
        super().__init__("node", node, "no site of this plane owns the node")


class Sites:
    """The plane's registry: site name -> :class:`Site`, in the order they were added (the
    order the sites file gives, which issue 49 uses to choose a site for a job naming none).
    Routes each node, and each job's start and stop, to the sites concerned."""

    def __init__(self, sites: Iterable[Site] = ()) -> None:
        self._sites: dict[str, Site] = {}
        # the sites with threads, found once as each is added: a runtime-checkable protocol's
        # isinstance reads every member, and every submission asks (docs/benchmarks.md)
        self._active: list[ActiveSite] = []
        for site in sites:
            self.add(site)

    def add(self, site: Site) -> None:
        """Register ``site`` (``xpupool up`` does, before serving); a second site of the same
        name is refused."""
        if site.name in self._sites:
            raise RequestError("site", site.name, "a site of that name is registered already")
        self._sites[site.name] = site
        if isinstance(site, ActiveSite):
            self._active.append(site)

    def __getitem__(self, name: str) -> Site:
        return self._sites[name]

    def __iter__(self) -> Iterator[Site]:
        return iter(self._sites.values())

    def __len__(self) -> int:
        return len(self._sites)

    def active(self) -> list[ActiveSite]:
        """The sites with threads of their own, in order."""
        return list(self._active)

    def site_of(self, record: NodeRecord) -> Site:
        """The site that owns ``record``; :class:`UnknownSiteError` if none does."""
        for site in self._sites.values():
            if site.owns(record):
                return site
        raise UnknownSiteError(record.node.name)

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        """``records`` as the engine host takes them, each listed by its own site."""
        by_site: dict[str, list[NodeRecord]] = {}
        for rec in records:
            by_site.setdefault(self.site_of(rec).name, []).append(rec)
        for name, recs in by_site.items():
            yield from self._sites[name].hosted(recs)

    def _of_job(self, job: HeldJob, records: dict[str, NodeRecord]) -> list[Site]:
        names = {a.node for a in job.allocations}
        out: list[Site] = []
        for name in sorted(names):
            rec = records.get(name)
            if rec is None:
                continue  # deleted under the job: nothing runs there to start or stop
            site = self.site_of(rec)
            if site not in out:
                out.append(site)
        return out

    def adopt(self, jobs: Iterable[HeldJob], records: dict[str, NodeRecord]) -> None:
        """Hand each site the held jobs on its nodes (``records``: the node book), after the
        plane read its books from the store; every site is called, with none for some."""
        mine: dict[str, list[HeldJob]] = {name: [] for name in self._sites}
        for job in jobs:
            for site in self._of_job(job, records):
                mine[site.name].append(job)
        for name, site in self._sites.items():
            site.adopt(mine[name])

    def start(self, job: HeldJob, records: dict[str, NodeRecord]) -> None:
        """Start ``job`` on every site its allocations are on (``records``: the node book)."""
        for site in self._of_job(job, records):
            if site.start(job):  # may run now: a stop waits for the site's reports
                job.handed.update(
                    a.replica
                    for a in job.allocations
                    if a.node in records and site.owns(records[a.node])
                )

    def foreign(self) -> Iterator[tuple[tuple[str, str], Sequence[Allocation]]]:
        """Every site's :meth:`Site.foreign` use, keyed (site, holder)."""
        for name, site in self._sites.items():
            for holder, allocations in site.foreign().items():
                yield (name, holder), allocations

    def secret_changed(self, name: str) -> None:
        """Tell the sites that read the admin's secrets that ``name`` was set."""
        for site in self._sites.values():
            if isinstance(site, SecretReader):
                site.secret_changed(name)

    def stop(self, job: HeldJob, records: dict[str, NodeRecord]) -> None:
        """Stop ``job`` on every site its allocations are on (``records``: the node book)."""
        for site in self._of_job(job, records):
            site.stop(job)
