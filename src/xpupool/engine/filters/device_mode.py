"""Which cards a request's sharing modes allow (``DeviceRequest.share_modes``).

A card's node may say how the card is shared (``Device.share_mode``): HAMi's device plugin
registers ``hami-core`` (its in-container limiter), ``mps`` (NVIDIA's Multi-Process Service) or
``mig`` (MIG instances), and a pod asks for one with ``nvidia.com/vgpu-mode``. A card in another
mode is refused (HAMi counts it as ``CardTypeMismatch``, pkg/device/nvidia/device.go
``checkType``); a card whose node states no mode takes any request, as HAMi's substring test of an
empty mode passes. Modes are evaluated once per distinct mode in the cluster, then spread to
devices by id.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceMode(SimpleStages):
    name: ClassVar[str] = "DeviceMode"
    reason: ClassVar[Reason] = Reason.SHARE_MODE
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        wanted = req.devices.share_modes
        if not wanted:
            return None
        # per mode id, then a trailing True for the cards of no stated mode (id -1)
        table = np.asarray([m in wanted for m in state.share_modes] + [True], np.bool_)
        result: BoolArray = table[state.dev_mode]
        return result
