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
from xpupool.engine.filters.device_tasks import DeviceTasks
from xpupool.engine.filters.device_uuid import DeviceUuid
from xpupool.engine.filters.device_vendor import DeviceVendor
from xpupool.engine.filters.node_container_runtime import NodeContainerRuntime
from xpupool.engine.filters.node_cpu import NodeCpu
from xpupool.engine.filters.node_memory import NodeMemory
from xpupool.engine.filters.node_schedulable import NodeSchedulable
from xpupool.engine.filters.software import Software
from xpupool.engine.filters.topology import SameLinkGroup
from xpupool.engine.scorers.base import Scorer, ScorerEnv
from xpupool.engine.scorers.best_fit import BestFit
from xpupool.engine.scorers.binpack import NodeBinpack
from xpupool.engine.scorers.dot_product import DotProduct
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.scorers.gpu_clustering import GpuClustering
from xpupool.engine.scorers.gpu_packing import GpuPacking
from xpupool.engine.scorers.random_pick import RandomPick
from xpupool.engine.scorers.spread import NodeSpread
from xpupool.engine.scorers.topology import Topology
from xpupool.engine.scorers.xpupool import Xpupool, XpupoolFine, XpupoolGreedy

NODE_FILTERS: tuple[NodeFilter, ...] = (
    NodeSchedulable(),
    NodeContainerRuntime(),
    NodeCpu(),
    NodeMemory(),
)
STATIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (
    DeviceHealth(),
    DeviceVendor(),
    DeviceModel(),
    DeviceUuid(),
    CardMemory(),
    Software(),
)
DYNAMIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (DeviceMemory(), DeviceCores(), DeviceTasks())
GROUP_FILTER = SameLinkGroup()

# name -> factory(env); a scorer draws randomness from env.seed and typical shapes from env.workload.
SCORERS: dict[str, Callable[[ScorerEnv], Scorer]] = {
    NodeBinpack.name: lambda env: NodeBinpack(),
    NodeSpread.name: lambda env: NodeSpread(),
    Topology.name: lambda env: Topology(),
    RandomPick.name: lambda env: RandomPick(env.seed),
    Fgd.name: Fgd,
    BestFit.name: lambda env: BestFit(),
    DotProduct.name: lambda env: DotProduct(),
    GpuPacking.name: lambda env: GpuPacking(),
    GpuClustering.name: lambda env: GpuClustering(),
    Xpupool.name: Xpupool,
    XpupoolFine.name: XpupoolFine,
    XpupoolGreedy.name: XpupoolGreedy,
}
