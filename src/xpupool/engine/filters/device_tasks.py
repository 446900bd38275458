"""A free task slot on a device: fewer tasks share it than its limit (HAMi's ``deviceSplitCount``)."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.capacity import slot_free
from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceTasks(SimpleStages):
    name: ClassVar[str] = "DeviceTasks"
    reason: ClassVar[Reason] = Reason.DEVICE_TASK_LIMIT
    dynamic: ClassVar[bool] = True

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        if not state.tasks_limited:  # no card has a limit: nothing to check, nothing to pay
            return None
        return slot_free(state.dev_task_free)
