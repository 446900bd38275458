"""UUID include and exclude lists; an excluded UUID loses even when it is also included."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DeviceUuid(SimpleStages):
    name: ClassVar[str] = "DeviceUuid"
    reason: ClassVar[Reason] = Reason.UUID_NOT_ALLOWED
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        include, exclude = req.devices.uuids, req.devices.exclude_uuids
        if not include and not exclude:
            return None
        shape = state.dev_present.shape
        if include:
            mask = np.zeros(shape, np.bool_)
            flat = mask.reshape(-1)
            for uuid in include:
                slot = state.uuid_slot.get(uuid)
                if slot is not None:
                    flat[slot] = True
        else:
            mask = np.ones(shape, np.bool_)
            flat = mask.reshape(-1)
        for uuid in exclude:
            slot = state.uuid_slot.get(uuid)
            if slot is not None:
                flat[slot] = False
        return mask
