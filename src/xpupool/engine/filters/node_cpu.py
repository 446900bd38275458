"""Enough free CPU (millicores) on the node for one replica."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.filters.base import FixedReason
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeCpu(FixedReason):
    name: ClassVar[str] = "NodeCpu"
    reason: ClassVar[Reason] = Reason.INSUFFICIENT_CPU

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        return None if req.cpu_milli == 0 else state.node_cpu_free >= req.cpu_milli
