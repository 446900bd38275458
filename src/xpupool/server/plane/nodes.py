"""The plane's node book: every node record, read through views, and changed only here, as the
node lifecycle says (``node_lifecycle.py``): registrations, heartbeats, a node lost, cordons,
drains and deletions. ``ControlPlane`` inherits these methods; call them under the plane's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from xpupool.model.errors import Conflict, NotFound
from xpupool.model.taint import Taint
from xpupool.server.drain import plan
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane import store
from xpupool.server.plane.lock import PlaneLock
from xpupool.server.plane.records import Built, HeldJob, NodeRecord
from xpupool.server.plane.store import node_values, taints_to_row
from xpupool.server.schemas.agent_protocol import DeviceMetrics

if TYPE_CHECKING:
    from xpupool.engine.engine import Engine
    from xpupool.server.audit import AuditLog
    from xpupool.server.auth import Principal
    from xpupool.server.card_health import CardHealth
    from xpupool.server.live_metrics import LiveMetrics
    from xpupool.server.plane.recut_backoff import RecutBackoff

log = logging.getLogger("xpupool.server")


@dataclass(frozen=True, slots=True)
class Deletion:
    """What :meth:`NodeBook.delete_node` did to node ``rec`` (the record as it was)."""

    rec: NodeRecord
    removed: bool  # gone now; else cordoned and marked, removed when ``holders`` end
    holders: list[str] = field(default_factory=list)  # "allocation A (job J)" still there
    revoked: list[int] = field(default_factory=list)  # token ids revoked with the removal


class NodeBook:
    """The methods over ``ControlPlane``'s node records."""

    if TYPE_CHECKING:  # what ControlPlane holds and does, that these methods use
        _nodes: dict[str, NodeRecord]
        _nodes_changed: int
        _agent_nodes: tuple[int, list[tuple[str, NodeRecord]]]
        _held: dict[int, HeldJob]
        _metrics: dict[str, DeviceMetrics]
        _principals: dict[str, Principal]
        _released_nodes: set[str]
        _lock: PlaneLock
        audit: AuditLog
        live: LiveMetrics
        card_health: CardHealth
        recut_backoff: RecutBackoff
        monotonic: Callable[[], float]
        clock: Callable[[], float]

        @property
        def engine(self) -> Engine: ...

        def bump(self) -> None: ...

        def build(self, nodes: Mapping[str, NodeRecord]) -> Built: ...

        def install(self, built: Built) -> None: ...

        def write(self) -> AbstractContextManager[Connection]: ...

        def rebuild_engine(self, conn: Connection | None = None) -> None: ...

    @property
    def node_records(self) -> Mapping[str, NodeRecord]:
        """Every node the plane serves, by name; read-only (change them with the methods)."""
        return MappingProxyType(self._nodes)

    def node(self, name: str) -> NodeRecord | None:
        return self._nodes.get(name)

    def heard_node_records(self) -> list[tuple[str, NodeRecord]]:
        """(name, record) of every node the plane hears from, and so may find silent: an
        agent's (``source`` 'agent': its heartbeats) and a Kubernetes site's (``kubernetes:``
        its name: heard while the site's API server answers, ``site_health.hear``); a list that
        is built again only when nodes come or go: the lost-node watch asks every few seconds,
        and walking thousands of cluster-file nodes under the lock for none of them would make
        an idle pool's cost grow with its size (issue 25)."""
        if self._agent_nodes[0] != self._nodes_changed:
            heard = [(n, r) for n, r in self._nodes.items() if heard_source(r.source)]
            self._agent_nodes = (self._nodes_changed, heard)
        return list(self._agent_nodes[1])

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Whether the engine may place on node ``name``, as the node lifecycle said (a lost
        node registering again is ready: ``NodeOutcome.bump``)."""
        self.engine.set_node_schedulable(name, schedulable)

    def record_metrics(self, m: DeviceMetrics, at: float) -> None:
        """A heartbeat's readings of one registered device, taken at ``at`` (Unix time)."""
        self._metrics[m.uuid] = m
        self.live.record(
            m.uuid, at, m.utilization_pct, m.memory_used_mib, m.power_w, m.temperature_c
        )

    def device_metrics(self, uuid: str) -> DeviceMetrics | None:
        """The last readings of device ``uuid`` (None: none since it registered)."""
        return self._metrics.get(uuid)

    def advance_drains(self, conn: Connection, names: Iterable[str]) -> None:
        """Apply what draining nodes among ``names`` wait for, as far as the allocations still
        on them allow: a device whose last allocation ended is dropped or changed now (what a
        registration's drain registered), a node the admin deletes is removed once nothing is
        held there (a deletion's drain)."""
        changed = []
        for name in names:
            rec = self._nodes.get(name)
            if rec is None or (rec.target is None and rec.deleting_since is None):
                continue
            on_node = [
                (j.id, a) for j in self._held.values() for a in j.allocations if a.node == name
            ]
            if rec.deleting_since is not None and not on_node:
                revoked = self.remove_node(conn, name, nl.Emptied())
                self.forget_node(name)
                self.audit.record(
                    None,
                    "delete_node",
                    f"node {name}",
                    200,
                    f"ok: drained and removed (deletion asked at {rec.deleting_since:.0f}); "
                    f"tokens revoked: {revoked or 'none'}",
                    conn,
                )
                log.warning("node %s: its last allocation ended, node deleted", name)
                changed.append(name)
                continue
            if rec.target is None:
                continue
            step = plan(rec.node, rec.target, on_node)
            if step.serve == rec.node:
                continue
            out = nl.transition(rec.life, nl.DrainStep(done=step.target is None))
            rec.node, rec.target = step.serve, step.target
            assert out.life is not None
            rec.live(out.life)
            store.update_node(conn, name, node_values(rec))
            changed.append(name)
            log.info("node %s: drained devices applied (%d left to drain)", name, len(rec.draining))
        if changed:
            self.rebuild_engine(conn)

    # ------------------------------------------------------------------ nodes
    # Every change of a node row and record is made here, as the node lifecycle says
    # (``node_lifecycle.py``); the services decide what to ask for, under the lock.
    def node_event(self, conn: Connection, name: str, event: nl.NodeEvent) -> nl.NodeOutcome:
        """Move node ``name`` as :func:`~xpupool.server.plane.node_lifecycle.transition` says
        for ``event``: the lifecycle's columns are written in ``conn``'s transaction first, then
        the record and the engine follow, and pending jobs are woken when capacity may have
        grown. Raises :class:`~xpupool.server.plane.node_lifecycle.IllegalNodeTransition` (409)
        before anything is written; an event that removes the node goes to
        :meth:`remove_node`."""
        rec = self._nodes[name]
        before = rec.life
        out = nl.transition(before, event)
        if out.life is None:
            raise nl.IllegalNodeTransition(before, event)  # a removal: remove_node's
        after = out.life
        values = nl.row_values(after)
        was = nl.row_values(before)
        changed = {k: v for k, v in values.items() if was[k] != v}
        if isinstance(event, (nl.Cordon, nl.Uncordon)):
            changed["schedulable"] = values["schedulable"]  # the admin's word, stored as given
        if changed:
            store.update_node(conn, name, changed)
        rec.live(after)
        if out.cancelled_deletion:
            log.warning("node %s uncordoned: its deletion is cancelled", name)
        if after.schedulable != before.schedulable or isinstance(event, nl.Cordon | nl.Uncordon):
            self.engine.set_node_schedulable(name, after.schedulable)
        if out.bump:
            self.bump()
        return out

    def remove_node(self, conn: Connection, name: str, event: nl.NodeEvent) -> list[int]:
        """The store's half of deleting node ``name`` for ``event`` (which the node lifecycle
        must say removes it), in ``conn``'s transaction: its row and its cards' re-cut rests go
        and every live credential bound to it is revoked; returns the revoked token ids.
        Nothing may be held on the node: the caller checked, and rebuilds the engine after
        :meth:`forget_node`."""
        rec = self._nodes[name]
        if not nl.transition(rec.life, event).removed:
            raise nl.IllegalNodeTransition(rec.life, event)
        self.recut_backoff.forget_node(conn, name)  # a rolled-back write reloads the books
        return store.delete_node(conn, name)

    def forget_node(self, name: str) -> None:
        """Memory's half of deleting node ``name``: its record and its devices' metrics go,
        cached principals are dropped (their tokens may be revoked now), and the in-process
        agent speaks for it no more. The engine still has it until the caller rebuilds it."""
        rec = self._nodes.pop(name)
        self._nodes_changed += 1
        for n in (rec.node, rec.target):
            for d in n.devices if n is not None else ():
                self._metrics.pop(d.uuid, None)
        self._principals.clear()
        self._released_nodes.add(name)

    def cordon_node(self, conn: Connection, name: str, cordoned: bool) -> None:
        """Cordon (or uncordon) a node in memory, engine and store; what runs there stays.
        Uncordoning a node that waits to be deleted cancels the deletion."""
        self.node_event(conn, name, nl.Cordon() if cordoned else nl.Uncordon())

    def heard(self, conn: Connection, names: list[str], at: float) -> None:
        """Heartbeats of ``names`` (registered nodes) arrived at ``at`` (Unix time): each is
        seen now (memory, and the stored ``last_heartbeat``); a lost one is made ready again
        only by :meth:`node_event` (``Heard``)."""
        monotonic = self.monotonic()
        for name in names:
            self._nodes[name].heard(at, monotonic)
        store.touch_nodes(conn, names, at)

    def register_node(self, conn: Connection, fresh: NodeRecord, values: dict[str, object]) -> None:
        """Store and serve ``fresh``, a registration the caller checked (under the lock, in
        ``conn``'s transaction): the row is updated with ``values`` (or added), then the record
        is served; the caller installs the engine it built for it."""
        status = nl.row_values(fresh.life)["status"]  # a known node keeps its cordon as stored
        row = {**values, "status": status}
        store.upsert_node(conn, fresh.node.name, row, fresh.registered_at)

    def serve_nodes(self, records: Mapping[str, NodeRecord]) -> None:
        """Serve ``records``, stored by :meth:`register_node`, :meth:`register_nodes` or
        :meth:`retaint_node` in the transaction that just committed (under the same lock)."""
        self._nodes.update(records)
        self._nodes_changed += 1

    def register_nodes(self, conn: Connection, rows: list[dict[str, object]]) -> None:
        """Store new node rows (cluster-file nodes, registered in one go)."""
        store.insert_nodes(conn, rows)

    def retaint_node(self, conn: Connection, fresh: NodeRecord) -> None:
        """Store ``fresh``'s taints (the admin's change); :meth:`serve_nodes` serves it."""
        store.update_node(conn, fresh.node.name, {"taints": taints_to_row(fresh.node.taints)})

    def cordon_device(self, conn: Connection, rec: NodeRecord, uuid: str, cordoned: bool) -> None:
        """Cordon (or uncordon) one device of ``rec``; a draining device stays cordoned."""
        (rec.cordoned_devices.add if cordoned else rec.cordoned_devices.discard)(uuid)
        store.update_node(conn, rec.node.name, {"cordoned_devices": sorted(rec.cordoned_devices)})
        self.engine.set_device_cordoned(uuid, cordoned or uuid in rec.draining)
        if not cordoned:
            self.bump()

    # ------------------------------------------------------------------ the admin's node changes
    # Each takes the plane's lock itself: what it checks still holds when it writes.
    def set_cordon(self, name: str, cordoned: bool) -> None:
        """Cordon (or uncordon) node ``name`` as one step; NotFound for an unknown node."""
        with self._lock:
            if name not in self._nodes:
                raise NotFound("node", name)
            with self.write() as conn:
                self.cordon_node(conn, name, cordoned)
                store.mark_site_drained(conn, [name], False)  # the admin's word on it now

    def set_site_cordon(self, site: str, cordoned: bool) -> list[str]:
        """Drain (or undrain) node site ``site`` as one step (``services/site_drain.py``): a
        drain cordons every node of it not cordoned yet and marks them as the drain's (stored);
        an undrain uncordons only the nodes the drain marked, so a node the admin had cordoned
        on its own stays cordoned. Returns the site's nodes' names; NotFound for a site no node
        names."""
        with self._lock:
            names = sorted(n for n, r in self._nodes.items() if site and r.node.site == site)
            if not names:
                raise NotFound("site", site)
            with self.write() as conn:
                if cordoned:
                    taken = [n for n in names if not self._nodes[n].cordoned]
                    for name in taken:
                        self.cordon_node(conn, name, True)
                    store.mark_site_drained(conn, taken, True)
                else:
                    marked = store.site_drained_nodes(conn, site)
                    for name in names:
                        if name in marked and self._nodes[name].cordoned:
                            self.cordon_node(conn, name, False)
                    store.mark_site_drained(conn, marked, False)
            return names

    def set_card_cordon(self, uuid: str, cordoned: bool) -> str:
        """Cordon (or uncordon) the card ``uuid`` as one step; the name of its node. NotFound
        for a UUID no node has. Uncordoning is the admin's word: the card's health verdict is
        forgotten (``card_health.py``), whatever it said."""
        with self._lock:
            rec = next(
                (r for r in self._nodes.values() if any(d.uuid == uuid for d in r.node.devices)),
                None,
            )
            if rec is None:
                raise NotFound("device", uuid)
            with self.write() as conn:
                self.cordon_device(conn, rec, uuid, cordoned)
            if not cordoned:
                self.card_health.forget(uuid)
            return rec.node.name

    def delete_node(self, name: str, drain: bool) -> Deletion:
        """Delete node ``name`` as one step: removed now (its row, its credentials, the engine
        rebuilt without it) when nothing is held there; else, with ``drain``, cordoned and
        marked (``advance_drains`` removes it when its last allocation ends). Raises NotFound
        for an unknown node, and Conflict, with nothing changed, when allocations hold it and
        not ``drain`` or when the engine without it would not take every held allocation; a
        store that cannot be written raises Unavailable, and memory stays as it was."""
        with self._lock:
            rec = self._nodes.get(name)
            if rec is None:
                raise NotFound("node", name)
            held = sorted(
                (a.id, job.id)
                for job in self._held.values()
                for a in job.allocations
                if a.node == name
            )
            holders = [f"allocation {alloc_id} (job {job_id})" for alloc_id, job_id in held]
            if holders and not drain:
                raise Conflict(
                    f"node {name} holds live work: {', '.join(holders)}. Nothing changed; delete "
                    f"it with drain=true (xpupool node delete {name} --drain) to cordon it now "
                    "and remove it when that work ends"
                )
            # the lifecycle decides: removed now when nothing is held there, else marked
            out = nl.transition(rec.life, nl.Delete(at=self.clock(), held=bool(holders)))
            if not out.removed:
                with self.write() as conn:
                    self.node_event(conn, name, nl.Delete(at=self.clock(), held=True))
                return Deletion(rec, removed=False, holders=holders)
            built = self.build({n: r for n, r in self._nodes.items() if n != name})
            if built.problems:  # nothing is held there: another node's trouble, not this one's
                raise Conflict(
                    f"node {name}: {'; '.join(p.reason for p in built.problems)}. Nothing changed"
                )
            with self.write() as conn:
                revoked = self.remove_node(conn, name, nl.Delete(at=self.clock(), held=False))
            self.forget_node(name)  # stored: now memory, still under the lock
            self.install(built)
            return Deletion(rec, removed=True, revoked=revoked)

    def retaint(
        self, name: str, change: Callable[[tuple[Taint, ...]], tuple[Taint, ...]]
    ) -> tuple[Taint, ...] | None:
        """Node ``name``'s taints become ``change(its taints now)``, read and changed as one
        step: stored, served, the engine built again over them (its columns hold taints as
        built) and pending jobs tried again. Returns the new taints (None: ``change`` left them
        as they were). Raises NotFound for an unknown node, what ``change`` raises, and
        Conflict, with nothing changed, when the rebuilt engine would not take every held
        allocation (taints move none: a store already inconsistent)."""
        with self._lock:
            rec = self._nodes.get(name)
            if rec is None:
                raise NotFound("node", name)
            taints = change(rec.node.taints)
            if taints == rec.node.taints:
                return None
            target = None if rec.target is None else replace(rec.target, taints=taints)
            fresh = replace(rec, node=replace(rec.node, taints=taints), target=target)
            built = self.build({**self._nodes, name: fresh})
            if built.problems:
                reasons = "; ".join(p.reason for p in built.problems)
                raise Conflict(f"node {name}: {reasons}. Nothing changed")
            with self.write() as conn:
                self.retaint_node(conn, fresh)
            self.serve_nodes({name: fresh})
            self.install(built)
            self.bump()
            return taints


def heard_source(source: str) -> bool:
    """Whether nodes of ``source`` are heard from (and go silent): not a cluster file's."""
    return source == "agent" or source.startswith("kubernetes:")
