"""Enough free memory on a device for one share (MiB, or a share of that card's size)."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.capacity import memory_fits
from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceMemory(SimpleStages):
    name: ClassVar[str] = "DeviceMemory"
    reason: ClassVar[Reason] = Reason.INSUFFICIENT_DEVICE_MEMORY
    dynamic: ClassVar[bool] = True

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        return memory_fits(state.dev_mem_free, ctx.need_mib)
