"""Enough free compute on a device (thousandths of the device; a whole card needs all of it)."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.capacity import cores_fit
from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceCores(SimpleStages):
    name: ClassVar[str] = "DeviceCores"
    reason: ClassVar[Reason] = Reason.INSUFFICIENT_DEVICE_CORES
    dynamic: ClassVar[bool] = True

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        if ctx.need_core == 0:
            return None
        return cores_fit(state.dev_core_free, ctx.need_core)
