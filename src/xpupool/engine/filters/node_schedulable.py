"""Nodes that are cordoned or gone take no new work."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.filters.base import FixedReason
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeSchedulable(FixedReason):
    name: ClassVar[str] = "NodeSchedulable"
    reason: ClassVar[Reason] = Reason.NODE_UNSCHEDULABLE

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        return state.node_ok
