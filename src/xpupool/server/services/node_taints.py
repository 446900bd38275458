"""Changing a node's taints (admin only): ``POST /v1/nodes/NAME/taints``, ``xpupool node taint``.

The change is ``kubectl taint``'s (``model/taint.py`` :func:`change_taints`) and all or nothing: a
refused one (422, 409) changes nothing. The taints are stored in the node's row, where a restart
reads them and a later registration keeps them (``services/fleet.py`` ``register``); the audit row
comes from the middleware, as for a cordon. The engine is built again over the node's new taints
(its columns hold taints as built, and taint changes are rare admin actions), as a registration
that changes a node does; pending jobs are then tried again, since a taint may have gone. Work
already running on the node stays (no NoExecute).
"""

from __future__ import annotations

import logging

from xpupool.model.taint import change_taints, parse_effect
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.nodes import Node, NodeTaintsIn
from xpupool.server.services.fleet import node_view

log = logging.getLogger("xpupool.server")


def taint_node(plane: ControlPlane, name: str, body: NodeTaintsIn) -> Node:
    """Apply ``body`` to node ``name``'s taints; NotFound for an unknown node, RequestError
    (``add[i]``, ``remove[i]``) or Conflict when refused; Unavailable when the store cannot be
    written, and then memory stays as it was."""
    remove = [
        (r.key, None if r.effect is None else parse_effect(f"remove[{i}].effect", r.effect))
        for i, r in enumerate(body.remove)
    ]
    taints = plane.retaint(
        name,
        lambda now: change_taints(
            name, now, [t.to_taint() for t in body.add], remove, overwrite=body.overwrite
        ),
    )
    if taints is not None:
        log.info("node %s taints: %s", name, ", ".join(map(str, taints)) or "none")
    return node_view(plane, name)
