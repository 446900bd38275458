"""Card size bounds (``A100:80GB``, ``24GB..40GB``), against each card's nominal marketed size."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class CardMemory(SimpleStages):
    name: ClassVar[str] = "CardMemory"
    reason: ClassVar[Reason] = Reason.CARD_MEMORY
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        low, high = req.devices.min_card_mib, req.devices.max_card_mib
        if low is None and high is None:
            return None
        mask: BoolArray = state.dev_present.copy()
        if low is not None:
            mask &= state.dev_card_mib >= low
        if high is not None:
            mask &= state.dev_card_mib <= high
        return mask
