"""A node's NoSchedule taints keep off every request that does not tolerate them all (kube's
TaintToleration filter; NoExecute counts as NoSchedule, as there).

The mask comes from ``ClusterState.taint_columns``, made once per distinct tolerations; a pool
without such taints skips the filter. An explanation names, per node, one taint it failed on.
"""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.model.request import Request


class NodeTaints:
    name: ClassVar[str] = "NodeTaints"
    reason: ClassVar[Reason] = Reason.UNTOLERATED_TAINT

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        columns = state.taint_columns
        return columns.answer(req.tolerations).ok if columns.keeps_off else None

    def why(self, req: Request) -> tuple[Reason, str]:
        """Only for a caller that cannot word each node (:meth:`details` does)."""
        return self.reason, "(a NoSchedule taint)"

    def details(self, req: Request, state: ClusterState) -> tuple[IntArray, tuple[str, ...]]:
        answer = state.taint_columns.answer(req.tolerations)
        return answer.first, answer.texts
