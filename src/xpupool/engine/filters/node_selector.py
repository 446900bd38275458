"""A request with a node selector (``label=gpu-pool=a``, repeatable) runs only on nodes that carry
every one of its labels with that value, as kube's nodeSelector.

The mask comes from :meth:`ClusterState.label_mask`, made once per distinct selector.
"""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeSelector:
    name: ClassVar[str] = "NodeSelector"
    reason: ClassVar[Reason] = Reason.LABEL_MISSING

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        return state.label_mask(req.node_selector) if req.node_selector else None

    def why(self, req: Request) -> tuple[Reason, str]:
        """ "label gpu-pool=a not on node" (all the selector's labels, as one)."""
        return self.reason, ",".join(f"{k}={v}" for k, v in req.node_selector)
