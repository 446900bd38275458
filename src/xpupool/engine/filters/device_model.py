"""Model any-of and exclude lists, matched through the catalog's names and aliases.

``A100`` matches ``NVIDIA A100-SXM4-80GB``; matching is exact on normalised names, never substring
(``T4`` must not match ``A10``). Tokens are evaluated once per distinct model in the cluster, then
spread to devices by model id.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


def model_table_mask(state: ClusterState, tokens: tuple[str, ...]) -> BoolArray:
    """Per model id (plus a trailing False for absent slots): does any token name that model?"""
    out = np.zeros(len(state.models) + 1, np.bool_)
    for model_id, (vendor, printed) in enumerate(state.models):
        out[model_id] = any(state.catalog.matches(t, printed, vendor) for t in tokens)
    return out


class DeviceModel(SimpleStages):
    name: ClassVar[str] = "DeviceModel"
    reason: ClassVar[Reason] = Reason.MODEL_NOT_ALLOWED
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        include, exclude = req.devices.models, req.devices.exclude_models
        if not include and not exclude:
            return None
        allowed = (
            model_table_mask(state, include) if include else np.ones(len(state.models) + 1, bool)
        )
        if exclude:
            allowed &= ~model_table_mask(state, exclude)
        allowed[-1] = False
        result: BoolArray = allowed[state.dev_model]
        return result
