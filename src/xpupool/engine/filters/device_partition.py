"""Which devices a request may take as to hardware partitions (``Device.partition``).

A MIG instance or an Ascend vNPU is a device of its own with its own memory and fault domain: it
takes only requests for partitions, each whole and alone, and no software share. A request naming
a profile (``mig=3g.40gb``) takes only partitions of that profile; one asking for isolated memory
(``mem=20Gi isolated``) takes partitions of the smallest profile of their card's model that
holds it (``PartitionScheme.smallest_holding``); any other request takes no partition at all. The
cards the instances were cut from are not devices of the pool, so a partitioned card is never
shared in software. Answers are per partition id (model, profile), a handful in a pool, then
spread to devices; a pool without partitions skips the filter for ordinary requests. A capacity
check: a profile cannot turn it off, as that would hand a partition to a share.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.catalog.partitions import load_partitions
from xpupool.engine.context import Context
from xpupool.engine.filters.base import SimpleStages, Stage
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class DevicePartition(SimpleStages):
    name: ClassVar[str] = "DevicePartition"
    reason: ClassVar[Reason] = Reason.PARTITION_PROFILE
    dynamic: ClassVar[bool] = False

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        d = req.devices
        if d.partition is None and d.isolated_mib is None:
            if not state.has_partitions:
                return None
            result: BoolArray = state.dev_partition < 0
            return result
        wanted = [
            _takes(state, i, d.partition, d.isolated_mib) for i in range(len(state.partitions))
        ]
        # per partition id, then a trailing False for the devices that are no partition (id -1)
        table = np.asarray([*wanted, False], np.bool_)
        found: BoolArray = table[state.dev_partition]
        return found

    def stages(self, req: Request, state: ClusterState, ctx: Context) -> list[Stage]:
        mask = self.device_mask(req, state, ctx)
        if mask is None:
            return []
        d = req.devices
        asked = d.partition is not None or d.isolated_mib is not None
        return [Stage(mask, Reason.PARTITION_PROFILE if asked else Reason.PARTITIONED)]


def _takes(
    state: ClusterState, partition: int, profile: str | None, isolated_mib: int | None
) -> bool:
    model, name = state.partitions[partition]
    if profile is not None:
        return name == profile
    assert isolated_mib is not None
    vendor, printed = state.models[model]
    scheme = load_partitions().scheme_for(printed, vendor, state.catalog)
    smallest = None if scheme is None else scheme.smallest_holding(isolated_mib)
    return smallest is not None and smallest.name == name
