"""Only present, healthy, uncordoned devices can be handed out."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceHealth(SimpleStages):
    name: ClassVar[str] = "DeviceHealth"
    reason: ClassVar[Reason] = Reason.DEVICE_UNHEALTHY
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        return state.dev_usable
