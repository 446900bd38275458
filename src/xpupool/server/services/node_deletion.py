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

from xpupool.server.plane import ControlPlane, NodeRecord
from xpupool.server.schemas.nodes import NodeDeletion

log = logging.getLogger("xpupool.server")


def delete_node(plane: ControlPlane, name: str, drain: bool) -> NodeDeletion:
    """Delete node ``name`` now, or with ``drain`` once nothing is held there. Raises NotFound
    for an unknown node, Conflict (nothing changed) when allocations hold it and not ``drain``;
    a store that cannot be written raises Unavailable, and memory stays as it was
    (``ControlPlane.delete_node``: the check and the change are one step)."""
    done = plane.delete_node(name, drain)
    rec, holders = done.rec, done.holders
    if done.removed:
        log.warning(
            "node %s deleted by the admin; tokens revoked: %s", name, done.revoked or "none"
        )
        return NodeDeletion(name=name, deleted=True, tokens_revoked=done.revoked, note=_next(rec))
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
