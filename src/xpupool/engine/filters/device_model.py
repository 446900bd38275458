"""Which cards a request's model lists allow: catalog names, and registered type substrings.

Two ways of naming a card, one judgement (``Reason.MODEL_NOT_ALLOWED``). ``models`` and
``exclude_models`` go through the catalog's names and aliases: ``A100`` matches
``NVIDIA A100-SXM4-80GB``, matching is exact on normalised names, never substring (``T4`` must not
match ``A10``). ``type_contains`` and ``exclude_type_contains`` are case-insensitive substrings of the
type string the card was registered under, HAMi's rule for its ``use-gputype`` annotations
(``pkg/device/devices.go`` ``CheckType``), where ``A10`` does match an A100: a Kubernetes pod written
for HAMi must land where HAMi would put it. Tokens are evaluated once per distinct model or type
string in the cluster, then spread to devices by id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import numpy.typing as npt

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


def type_table_mask(state: ClusterState, tokens: tuple[str, ...]) -> BoolArray:
    """Per type id (plus a trailing False for absent slots): does any token occur in that type
    string, ignoring case? An empty token occurs in every string; callers drop them, as HAMi does."""
    needles = [t.upper() for t in tokens]
    out = np.zeros(len(state.type_names) + 1, np.bool_)
    for type_id, name in enumerate(state.type_names):  # upper-cased by the state
        out[type_id] = any(n in name for n in needles)
    return out


class DeviceModel(SimpleStages):
    name: ClassVar[str] = "DeviceModel"
    reason: ClassVar[Reason] = Reason.MODEL_NOT_ALLOWED
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        d = req.devices
        by_model = _allowed(state, d.models, d.exclude_models, model_table_mask, state.dev_model)
        by_type = _allowed(
            state, d.type_contains, d.exclude_type_contains, type_table_mask, state.dev_type
        )
        if by_model is None or by_type is None:
            return by_model if by_type is None else by_type
        result: BoolArray = by_model & by_type
        return result


def _allowed(
    state: ClusterState,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    table: Callable[[ClusterState, tuple[str, ...]], BoolArray],
    ids: npt.NDArray[np.int32],
) -> BoolArray | None:
    """``[N, W]`` cards an any-of list and an exclude list allow (exclude wins), looked up through
    ``table`` (a per-id mask of the tokens) by each card's id in ``ids``; None: no lists."""
    if not include and not exclude:
        return None
    allowed = table(state, include) if include else ~table(state, ())
    if exclude:
        allowed &= ~table(state, exclude)
    allowed[-1] = False
    result: BoolArray = allowed[ids]
    return result
