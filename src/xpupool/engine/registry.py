"""Every plugin in one place: the ordered filter chain and the scorer factories by name.

Order matters only for explanations (a node is blamed on the first check it fails), and follows
kube's habit: cheap node checks, then what the request selects, then free capacity, then topology.
"""

from __future__ import annotations

from collections.abc import Callable

from xpupool.engine.filters.base import DeviceFilter, NodeFilter
from xpupool.engine.filters.card_memory import CardMemory
from xpupool.engine.filters.device_cores import DeviceCores
from xpupool.engine.filters.device_health import DeviceHealth
from xpupool.engine.filters.device_memory import DeviceMemory
from xpupool.engine.filters.device_model import DeviceModel
from xpupool.engine.filters.device_uuid import DeviceUuid
from xpupool.engine.filters.device_vendor import DeviceVendor
from xpupool.engine.filters.node_cpu import NodeCpu
from xpupool.engine.filters.node_memory import NodeMemory
from xpupool.engine.filters.node_schedulable import NodeSchedulable
from xpupool.engine.filters.software import Software
from xpupool.engine.filters.topology import SameLinkGroup
from xpupool.engine.scorers.base import Scorer
from xpupool.engine.scorers.binpack import NodeBinpack
from xpupool.engine.scorers.random_pick import RandomPick
from xpupool.engine.scorers.spread import NodeSpread
from xpupool.engine.scorers.topology import Topology

NODE_FILTERS: tuple[NodeFilter, ...] = (NodeSchedulable(), NodeCpu(), NodeMemory())
STATIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (
    DeviceHealth(),
    DeviceVendor(),
    DeviceModel(),
    DeviceUuid(),
    CardMemory(),
    Software(),
)
DYNAMIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (DeviceMemory(), DeviceCores())
GROUP_FILTER = SameLinkGroup()

# name -> factory(seed); a scorer that needs randomness draws it from the engine's seed.
SCORERS: dict[str, Callable[[int], Scorer]] = {
    NodeBinpack.name: lambda seed: NodeBinpack(),
    NodeSpread.name: lambda seed: NodeSpread(),
    Topology.name: lambda seed: Topology(),
    RandomPick.name: lambda seed: RandomPick(seed),
}
