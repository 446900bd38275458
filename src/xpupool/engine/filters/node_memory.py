"""Enough free host memory (MiB) on the node for one replica."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.filters.base import FixedReason
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeMemory(FixedReason):
    name: ClassVar[str] = "NodeMemory"
    reason: ClassVar[Reason] = Reason.INSUFFICIENT_MEMORY

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        return None if req.memory_mib == 0 else state.node_mem_free >= req.memory_mib
