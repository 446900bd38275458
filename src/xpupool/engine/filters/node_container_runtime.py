"""A job that runs a container image goes only to nodes whose agent found a container runtime."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.filters.base import FixedReason
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeContainerRuntime(FixedReason):
    name: ClassVar[str] = "NodeContainerRuntime"
    reason: ClassVar[Reason] = Reason.NO_CONTAINER_RUNTIME

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        return state.node_container if req.container else None
