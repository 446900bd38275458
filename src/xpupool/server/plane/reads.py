"""The plane's read operations for the services, pages and metrics outside the package: each takes
the plane's lock itself, so that what it returns was read from one state of the books (no
registration, placement or release lands between two of its reads). ``ControlPlane`` inherits
them; nothing outside the package takes the lock (``lock.py``).

Small questions have a method each. A page or a sum built from many views at once (the fleet
overview, the queues page, a metrics scrape) goes through :meth:`PlaneReads.read` with a function
that only reads, instead of a method per page in the plane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from xpupool.server.plane.lock import PlaneLock
from xpupool.server.plane.records import RunView
from xpupool.server.usage.idle_power import idle_readings

if TYPE_CHECKING:
    from xpupool.catalog import AcceleratorCatalog
    from xpupool.engine.state import ClusterState
    from xpupool.engine.verdict import Miss, Verdicts
    from xpupool.model.request import Request
    from xpupool.server.live_metrics import LiveMetrics
    from xpupool.server.plane.records import HeldJob, NodeRecord
    from xpupool.server.schemas.agent_protocol import DeviceMetrics

T = TypeVar("T")


class PlaneReads:
    """Read operations over ``ControlPlane``'s books, each under the plane's lock."""

    if TYPE_CHECKING:  # what ControlPlane holds, that these methods use
        _lock: PlaneLock
        _nodes: dict[str, NodeRecord]
        _held: dict[int, HeldJob]
        _metrics: dict[str, DeviceMetrics]
        live: LiveMetrics

        @property
        def cluster_state(self) -> ClusterState: ...

        @property
        def verdicts(self) -> Verdicts: ...

    def read(self, look: Callable[[], T]) -> T:
        """``look()`` with the plane's lock held: every view and read operation it calls sees
        the same state of the books. ``look`` reads only (views, :meth:`read_columns`, these
        methods): a change belongs in a named operation of the plane."""
        with self._lock:
            return look()

    def read_columns(self, look: Callable[[ClusterState], T]) -> T:
        """``look`` over the engine's columns (the engine served now, which a registration may
        replace right after): what it reads of them is one state of the pool."""
        with self._lock:
            return look(self.cluster_state)

    def idle_power_readings(self) -> list[tuple[str, float]]:
        """(model, watts) of each usable card holding nothing whose agent read its power
        (``usage/idle_power.py``), as one state of the pool."""
        with self._lock:
            return idle_readings(self.cluster_state, self._metrics.get)

    def node_names(self, site: str = "") -> list[str]:
        """The names of the nodes of ``site`` (every node when empty), by site and then by name."""
        with self._lock:
            found = [
                (r.node.site, n) for n, r in self._nodes.items() if not site or r.node.site == site
            ]
        return [n for _, n in sorted(found)]

    def node_sites(self) -> set[str]:
        """The sites of the nodes served now."""
        with self._lock:
            return {rec.node.site for rec in self._nodes.values()}

    def registered_models(self) -> tuple[list[tuple[str, str]], AcceleratorCatalog]:
        """(vendor, model) of every device of every registered node (cordoned and lost ones
        still belong to the pool), with the catalog of the engine that serves them: one state."""
        with self._lock:
            pool = [(d.vendor, d.model) for rec in self._nodes.values() for d in rec.node.devices]
            return pool, self.cluster_state.catalog

    def never_fits(self, req: Request) -> Miss | None:
        """The engine's never-fits verdict on ``req`` (None: some node could hold it empty), on
        the engine served now."""
        with self._lock:
            return self.verdicts.never_fits(req)

    def replica_memory(self) -> list[tuple[int, int, str, str, int]]:
        """(job, replica, node, card uuid, MiB) of what the agents last measured each held
        replica's processes to use on each card; a replica without a node reads ''."""
        with self._lock:
            out = []
            for job in self._held.values():
                nodes = {a.replica: a.node for a in job.allocations}
                for replica, per_card in job.device_memory_used_mib.items():
                    for uuid, mib in per_card.items():
                        out.append((job.id, replica, nodes.get(replica, ""), uuid, mib))
            return out

    def forget_gone_cards(self) -> None:
        """The live readings of cards no longer in the pool go, once they are many (a quarter
        of the pool, and some) so that a scrape pays for the sweep rarely."""
        with self._lock:
            st = self.cluster_state
            if len(self.live) > st.n_devices + st.n_devices // 4 + 64:
                self.live.keep_only(st.uuid_slot)

    def held_run(self, job_id: int) -> RunView | None:
        """Job ``job_id``'s run as held now (None: not held: pending, or ended and released)."""
        with self._lock:
            job = self._held.get(job_id)
            return None if job is None else RunView.of(job)

    def held_runs(self, job_ids: Iterable[int]) -> dict[int, RunView]:
        """The runs of those of ``job_ids`` held now, as one read (a job not held is absent): a
        Kubernetes site's batch of pod events (10,000 after a restart) takes the lock once, not
        once per pod and question (``k8s/site/site.py``)."""
        with self._lock:
            return {j: RunView.of(job) for j in job_ids if (job := self._held.get(j)) is not None}
