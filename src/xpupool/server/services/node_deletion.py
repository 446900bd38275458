"""Deleting a node (admin only, issue 18): the node leaves the engine and the store in one step,
and every credential bound to it is revoked, so its agent is refused from then on.

A node holding live allocations is not deleted from under them: the request is refused (409,
naming each allocation and job), or, asked to drain, the node is cordoned and marked, and the
drain machinery a registration's drain uses (``ControlPlane.advance_drains``, called whenever
allocations are released) removes it when its last allocation ends. A refused or failed deletion
changes nothing, in memory or in the store. A cluster-file node comes back at the next start
with ``--cluster FILE``: the file is the operator's declaration of the fleet, as a kubelet
registers its node again after ``kubectl delete node``.
"""

from __future__ import annotations

import logging

from xpupool.model.errors import Conflict, NotFound
from xpupool.server.plane import ControlPlane, NodeRecord
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.schemas.nodes import NodeDeletion

log = logging.getLogger("xpupool.server")


def delete_node(plane: ControlPlane, name: str, drain: bool) -> NodeDeletion:
    """Delete node ``name`` now, or with ``drain`` once nothing is held there. Raises NotFound
    for an unknown node, Conflict (nothing changed) when allocations hold it and not ``drain``;
    a store that cannot be written raises Unavailable, and memory stays as it was."""
    with plane.locked():
        rec = plane.node(name)
        if rec is None:
            raise NotFound("node", name)
        held = sorted(
            (a.id, job.id)
            for job in plane.held_jobs.values()
            for a in job.allocations
            if a.node == name
        )
        holders = [f"allocation {alloc_id} (job {job_id})" for alloc_id, job_id in held]
        if holders and not drain:
            raise Conflict(
                f"node {name} holds live work: {', '.join(holders)}. Nothing changed; delete it "
                f"with drain=true (xpupool node delete {name} --drain) to cordon it now and "
                "remove it when that work ends"
            )
        # the lifecycle decides: removed now when nothing is held there, else marked and cordoned
        out = nl.transition(rec.life, nl.Delete(at=plane.clock(), held=bool(holders)))
        if not out.removed:
            return _drain(plane, rec, holders)
        built = plane.build({n: r for n, r in plane.node_records.items() if n != name})
        if built.problems:  # nothing is held there: another node's trouble, not this deletion's
            raise Conflict(
                f"node {name}: {'; '.join(p.reason for p in built.problems)}. Nothing changed"
            )
        with plane.write() as conn:
            revoked = plane.remove_node(conn, name, nl.Delete(at=plane.clock(), held=False))
        # stored: now memory, still under the lock
        plane.forget_node(name)
        plane.install(built)
        log.warning("node %s deleted by the admin; tokens revoked: %s", name, revoked or "none")
    return NodeDeletion(name=name, deleted=True, tokens_revoked=revoked, note=_next(rec))


def _drain(plane: ControlPlane, rec: NodeRecord, holders: list[str]) -> NodeDeletion:
    """Cordon ``rec`` and mark it to be deleted when ``holders`` end (asked again: as it was)."""
    name = rec.node.name
    with plane.write() as conn:
        plane.node_event(conn, name, nl.Delete(at=plane.clock(), held=True))
    log.warning("node %s: deletion waits for %s", name, ", ".join(holders))
    note = (
        f"cordoned; removed, and its tokens revoked, when {', '.join(holders)} "
        f"{'ends' if len(holders) == 1 else 'end'} (uncordon it to cancel). {_next(rec)}"
    )
    return NodeDeletion(name=name, deleted=False, waiting_for=holders, note=note)


def _next(rec: NodeRecord) -> str:
    """What brings the node back, for the reply."""
    if rec.source == "cluster":
        return (
            f"node {rec.node.name} comes from the cluster file: the next `xpupool up --cluster "
            "FILE` registers it again; remove it from the file to keep it out"
        )
    return (
        f"node {rec.node.name} registers again only with a credential the admin issues "
        f"(token issue --agent --node {rec.node.name}), or at the next start of the server "
        "whose in-process agent hosted it"
    )
