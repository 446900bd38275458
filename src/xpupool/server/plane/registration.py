"""Registering nodes, as the plane's own operations: each takes the plane's lock itself, so what it
checks (device UUIDs free, live allocations kept whole, the engine that would serve the new
inventory) still holds when it writes, and a refused registration changes nothing, in memory or
in the store. ``ControlPlane`` inherits these methods; ``services/fleet.py`` turns an agent's
body or a cluster file into their arguments.

Registration is idempotent: the same node registering the same devices changes nothing; changed
devices rebuild the engine (rare) off to the side, and only a registration that keeps every live
allocation whole is stored and served (or, asked to drain, one that keeps what they hold until
they end: ``server/drain.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from xpupool.model.device import Node
from xpupool.model.errors import Conflict, RequestError
from xpupool.server.drain import plan
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane.lock import PlaneLock
from xpupool.server.plane.records import Built, HeldJob, NodeRecord
from xpupool.server.plane.store import node_values, taints_to_row
from xpupool.server.schemas.nodes import NodeStatus

log = logging.getLogger("xpupool.server")


class NodeRegistration:
    """Registrations over ``ControlPlane``'s node book (``nodes.py``), each as one step."""

    if TYPE_CHECKING:  # what ControlPlane holds and does, that these methods use
        _nodes: dict[str, NodeRecord]
        _held: dict[int, HeldJob]
        _lock: PlaneLock
        clock: Callable[[], float]
        monotonic: Callable[[], float]

        def bump(self) -> None: ...

        def build(self, nodes: Mapping[str, NodeRecord]) -> Built: ...

        def install(self, built: Built) -> None: ...

        def write(self) -> AbstractContextManager[Connection]: ...

        def register_node(
            self, conn: Connection, fresh: NodeRecord, values: dict[str, object]
        ) -> None: ...

        def register_nodes(self, conn: Connection, rows: list[dict[str, object]]) -> None: ...

        def serve_nodes(self, records: Mapping[str, NodeRecord]) -> None: ...

        def set_schedulable(self, name: str, schedulable: bool) -> None: ...

    def register(
        self,
        node: Node,
        *,
        source: str,
        arch: str = "",
        os: str = "",
        drain: bool = False,
        within: Callable[[Connection], None] | None = None,
        declared_taints: bool = False,
    ) -> None:
        """Register or update ``node``, all or nothing. A device UUID another node has is a
        RequestError on ``devices[i].uuid``; a new inventory that would take a device (or CPU,
        memory) from under live allocations is Conflict naming them, unless ``drain``: then
        what is in the way is served as it was, cordoned, and changed when its last allocation
        ends. ``within`` runs in the registration's transaction before the node is written;
        raising there refuses the registration. ``node.taints`` are taken when the node is new
        (kubelet's ``--register-with-taints``); a node the store has keeps its own, which only
        the admin changes, so an agent cannot take off a taint the admin put on; unless
        ``declared_taints``: a Kubernetes site's Node, whose ``spec.taints`` the cluster's admin
        owns, is registered with them as they are now."""
        with self._lock:
            self._check_uuids_free(node)
            rec = self._nodes.get(node.name)
            if rec is not None and rec.node.taints != node.taints and not declared_taints:
                if node.taints:
                    log.info(
                        "node %s registers with taints %s; it keeps %s (taken at its first "
                        "registration, then changed by the admin: xpupool node taint)",
                        node.name,
                        ", ".join(map(str, node.taints)),
                        ", ".join(map(str, rec.node.taints)) or "none",
                    )
                node = replace(node, taints=rec.node.taints)
            held = [
                (j.id, a) for j in self._held.values() for a in j.allocations if a.node == node.name
            ]
            step = plan(rec.node if rec is not None else None, node, held)
            if step.blocked and not drain:
                raise Conflict(
                    f"node {node.name}: the new inventory would take what live work holds: "
                    f"{'; '.join(step.blocked)}. Nothing changed; register with drain: true to "
                    "cordon it now and apply the change when that work ends"
                )
            now = self.clock()
            out = nl.transition(
                rec.life if rec is not None else None, nl.Register(draining=step.target is not None)
            )
            assert out.life is not None  # a registration never removes a node
            fresh = NodeRecord(
                step.serve,
                source,
                NodeStatus.LOST if out.life.lost else NodeStatus.READY,
                out.life.cordoned,
                set(rec.cordoned_devices) if rec is not None else set(),
                arch,
                os,
                rec.registered_at if rec is not None else now,
                now,
                self.monotonic(),
                target=step.target,
                deleting_since=out.life.deleting_since,  # the admin's stands
            )
            changed = rec is None or rec.node != fresh.node or rec.target != fresh.target
            built = self.build({**self._nodes, node.name: fresh}) if changed else None
            if built is not None and built.problems:
                raise Conflict(
                    f"node {node.name}: {'; '.join(p.reason for p in built.problems)}. "
                    "Nothing changed"
                )
            values = {
                "site": node.site,
                "source": source,
                "labels": dict(node.labels),
                "arch": arch,
                "os": os,
                "runtime": node.container_runtime,
                "taints": taints_to_row(node.taints),
                "last_heartbeat": now,
                **node_values(fresh),
            }
            with self.write() as conn:
                if within is not None:  # e.g. a bootstrap exchange: commits with the node or not
                    within(conn)
                self.register_node(conn, fresh, values)
            # stored: now memory, still under the lock
            self.serve_nodes({node.name: fresh})
            if built is not None:
                self.install(built)
            elif out.bump:  # a lost node registers again: ready, and not cordoned
                self.set_schedulable(node.name, True)
                self.bump()
            if step.blocked:
                log.warning("node %s draining: %s", node.name, "; ".join(step.blocked))

    def _check_uuids_free(self, node: Node) -> None:
        """A device UUID names one device in the pool: another node's is refused."""
        owner = {
            d.uuid: name
            for name, rec in self._nodes.items()
            if name != node.name
            for n in (rec.node, rec.target)
            if n is not None
            for d in n.devices
        }
        for i, d in enumerate(node.devices):
            if d.uuid in owner:
                raise RequestError(
                    f"devices[{i}].uuid", d.uuid, f"already registered by node {owner[d.uuid]}"
                )

    def register_new(self, nodes: Iterable[Node], source: str) -> tuple[list[str], bool]:
        """Register the ``nodes`` the store does not have, in one go (a single engine rebuild),
        all or nothing; nodes it has are left as they are. The names registered, and whether the
        plane served any node before."""
        now = self.clock()
        with self._lock:
            known = bool(self._nodes)
            added: dict[str, NodeRecord] = {}
            for node in nodes:
                if node.name in self._nodes:
                    continue
                life = nl.transition(None, nl.Register(cordoned=not node.schedulable)).life
                assert life is not None
                added[node.name] = NodeRecord(
                    node, source, NodeStatus.READY, life.cordoned, set(), "", "", now
                )
            built = self.build({**self._nodes, **added})
            rows = [_new_row(rec, source, now) for rec in added.values()]  # before the lock
            with self.write() as conn:
                self.register_nodes(conn, rows)
            self.serve_nodes(added)
            self.install(built)
            return list(added), known


def _new_row(rec: NodeRecord, source: str, now: float) -> dict[str, object]:
    """The stored row of a node registered by :meth:`NodeRegistration.register_new`."""
    return {
        "name": rec.node.name,
        "site": rec.node.site,
        "source": source,
        **nl.row_values(rec.life),
        "labels": dict(rec.node.labels),
        "arch": "",
        "os": "",
        "runtime": rec.node.container_runtime,
        "taints": taints_to_row(rec.node.taints),
        "cordoned_devices": [],
        "last_heartbeat": None,
        "registered_at": now,
        **node_values(rec),
    }
