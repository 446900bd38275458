"""The request's vendor any-of list (``nvidia``, ``ascend``...; empty = any vendor)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request
from xpupool.model.vendor import VENDOR_KEYS


class DeviceVendor(SimpleStages):
    name: ClassVar[str] = "DeviceVendor"
    reason: ClassVar[Reason] = Reason.VENDOR_NOT_ALLOWED
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        vendors = req.devices.vendors
        if not vendors:
            return None
        allowed = np.zeros(len(VENDOR_KEYS) + 1, np.bool_)  # last entry: absent slot (-1)
        for key in vendors:
            allowed[VENDOR_KEYS.index(key)] = True
        result: BoolArray = allowed[state.dev_vendor]
        return result
