"""Topology constraints: a multi-device replica needs all its devices inside one group of the
node, a fast-link domain (``same-link-group``) or a NUMA node (``same-numa``, HAMi's numa-bind)."""

from __future__ import annotations

from typing import ClassVar, Protocol

from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.engine.topology import best_group_count
from xpupool.model.request import Topology


class GroupFilter(Protocol):
    """Runs after the device filters on the devices that passed them; a node check, not a
    device one. ``topology`` is the constraint it checks."""

    name: ClassVar[str]
    reason: ClassVar[Reason]
    topology: ClassVar[Topology]

    def applies(self, topology: Topology, k: int) -> bool: ...

    def node_mask(self, state: ClusterState, dev_fit: BoolArray, k: int) -> BoolArray: ...


class _SameGroup:
    topology: ClassVar[Topology]

    def applies(self, topology: Topology, k: int) -> bool:
        return topology is self.topology and k > 1

    def node_mask(self, state: ClusterState, dev_fit: BoolArray, k: int) -> BoolArray:
        mask: BoolArray = best_group_count(state, dev_fit, self.topology) >= k
        return mask


class SameLinkGroup(_SameGroup):
    name: ClassVar[str] = "SameLinkGroup"
    reason: ClassVar[Reason] = Reason.TOPOLOGY
    topology: ClassVar[Topology] = Topology.SAME_LINK_GROUP


class SameNuma(_SameGroup):
    """Devices without a NUMA node (not reported) are in no group: a node that does not say
    where its cards sit cannot promise them one NUMA node."""

    name: ClassVar[str] = "SameNuma"
    reason: ClassVar[Reason] = Reason.NUMA
    topology: ClassVar[Topology] = Topology.SAME_NUMA
