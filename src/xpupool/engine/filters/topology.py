"""``same-link-group``: a multi-device replica needs all its devices inside one fast-link domain."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.engine.topology import best_group_count
from xpupool.model.request import Topology


class SameLinkGroup:
    """Runs after the device filters on the devices that passed them; a node check, not a device one."""

    name: ClassVar[str] = "SameLinkGroup"
    reason: ClassVar[Reason] = Reason.TOPOLOGY

    def applies(self, topology: Topology, k: int) -> bool:
        return topology is Topology.SAME_LINK_GROUP and k > 1

    def node_mask(self, state: ClusterState, dev_fit: BoolArray, k: int) -> BoolArray:
        mask: BoolArray = best_group_count(state, dev_fit) >= k
        return mask
