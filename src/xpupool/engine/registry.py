"""Every plugin in one place: the ordered filter chain, the scorer and post-score factories by
name, and the arguments each plugin takes.

Order matters only for explanations (a node is blamed on the first check it fails), and follows
kube's habit: cheap node checks, then what the request selects, then free capacity, then topology.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from xpupool.engine.filters.base import DeviceFilter, NodeFilter
from xpupool.engine.filters.card_memory import CardMemory
from xpupool.engine.filters.chain import FilterChain
from xpupool.engine.filters.device_cores import DeviceCores
from xpupool.engine.filters.device_health import DeviceHealth
from xpupool.engine.filters.device_memory import DeviceMemory
from xpupool.engine.filters.device_mode import DeviceMode
from xpupool.engine.filters.device_model import DeviceModel
from xpupool.engine.filters.device_partition import DevicePartition
from xpupool.engine.filters.device_tasks import DeviceTasks
from xpupool.engine.filters.device_uuid import DeviceUuid
from xpupool.engine.filters.device_vendor import DeviceVendor
from xpupool.engine.filters.node_container_runtime import NodeContainerRuntime
from xpupool.engine.filters.node_cpu import NodeCpu
from xpupool.engine.filters.node_memory import NodeMemory
from xpupool.engine.filters.node_schedulable import NodeSchedulable
from xpupool.engine.filters.node_selector import NodeSelector
from xpupool.engine.filters.node_site import NodeSite
from xpupool.engine.filters.node_taints import NodeTaints
from xpupool.engine.filters.software import Software
from xpupool.engine.filters.topology import GroupFilter, SameLinkGroup, SameNuma
from xpupool.engine.fragmentation.workload_model import NAME as WORKLOAD
from xpupool.engine.fragmentation.workload_model import WorkloadArgs
from xpupool.engine.scorers.base import PluginArgs, PostScorer, Scorer, ScorerEnv
from xpupool.engine.scorers.best_fit import BestFit
from xpupool.engine.scorers.binpack import NodeBinpack
from xpupool.engine.scorers.cpu_only import CpuOnly
from xpupool.engine.scorers.dot_product import DotProduct
from xpupool.engine.scorers.energy import Energy, EnergyArgs
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.scorers.gpu_clustering import GpuClustering
from xpupool.engine.scorers.gpu_packing import GpuPacking
from xpupool.engine.scorers.random_pick import RandomPick
from xpupool.engine.scorers.site_preference import SitePreference
from xpupool.engine.scorers.spread import NodeSpread
from xpupool.engine.scorers.taint_toleration import TaintToleration
from xpupool.engine.scorers.throughput import Throughput
from xpupool.engine.scorers.topology import Topology
from xpupool.engine.scorers.xpupool import (
    Contention,
    FragmentationDelta,
    FullestCard,
    LookaheadStep,
    PackingLoss,
    SpareCpu,
)

NODE_FILTERS: tuple[NodeFilter, ...] = (
    NodeSchedulable(),
    NodeSite(),
    NodeSelector(),
    NodeTaints(),
    NodeContainerRuntime(),
    NodeCpu(),
    NodeMemory(),
)
STATIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (
    DeviceHealth(),
    DeviceVendor(),
    DeviceModel(),
    DeviceMode(),
    DevicePartition(),
    DeviceUuid(),
    CardMemory(),
    Software(),
)
DYNAMIC_DEVICE_FILTERS: tuple[DeviceFilter, ...] = (DeviceMemory(), DeviceCores(), DeviceTasks())
GROUP_FILTERS: tuple[GroupFilter, ...] = (SameLinkGroup(), SameNuma())

FILTERS: tuple[str, ...] = (
    *(f.name for f in NODE_FILTERS),
    *(f.name for f in (*STATIC_DEVICE_FILTERS, *DYNAMIC_DEVICE_FILTERS)),
    *(f.name for f in GROUP_FILTERS),
)
# What a node or card has left, and whether it can be used at all: a profile that turned one of
# these off would over-commit or place on broken hardware, so profiles cannot.
CAPACITY_FILTERS = frozenset(
    {
        NodeSchedulable.name,
        NodeCpu.name,
        NodeMemory.name,
        DeviceHealth.name,
        DevicePartition.name,
        DeviceMemory.name,
        DeviceCores.name,
    }
)


@functools.lru_cache(maxsize=64)  # one entry per distinct set of disabled filters in use
def filter_chain(disabled: frozenset[str] = frozenset()) -> FilterChain:
    """The registry's filters minus ``disabled`` (names already validated by the profile: an
    unknown or capacity name here is a bug, so it raises ValueError)."""
    wrong = (disabled - set(FILTERS)) | (disabled & CAPACITY_FILTERS)
    if wrong:
        raise ValueError(f"cannot disable filters {sorted(wrong)}")
    static = tuple(f for f in STATIC_DEVICE_FILTERS if f.name not in disabled)
    return FilterChain(
        node=tuple(f for f in NODE_FILTERS if f.name not in disabled),
        static=static,
        dynamic=DYNAMIC_DEVICE_FILTERS,
        groups=tuple(f for f in GROUP_FILTERS if f.name not in disabled),
        static_key=",".join(f.name for f in static),
    )


# name -> factory(env); a scorer draws randomness from env.seed and typical shapes from env.workload
# or the engine's shared workload model (env.model).
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
    SitePreference.name: lambda env: SitePreference(),
    TaintToleration.name: lambda env: TaintToleration(),
    CpuOnly.name: lambda env: CpuOnly(),
    Throughput.name: lambda env: Throughput(),
    Energy.name: Energy,
    # xpupool's policy, one term each (engine/scorers/xpupool/)
    FragmentationDelta.name: FragmentationDelta,
    PackingLoss.name: PackingLoss,
    FullestCard.name: lambda env: FullestCard(),
    Contention.name: Contention,
    SpareCpu.name: SpareCpu,
}
# name -> factory(env) of the post-score plugins a profile may list (``Profile.post``).
POST_SCORERS: dict[str, Callable[[ScorerEnv], PostScorer]] = {
    LookaheadStep.name: LookaheadStep,
}
# The plugins built on the engine's shared workload model: a profile with any of them may
# configure the model itself (``pluginConfig`` entry WORKLOAD), and its requests feed the model.
WORKLOAD_PLUGINS = frozenset(
    {
        FragmentationDelta.name,
        PackingLoss.name,
        Contention.name,
        SpareCpu.name,
        LookaheadStep.name,
    }
)
# name -> the plugin's arguments with their defaults, for the plugins that take any; a profile's
# ``pluginConfig`` overrides fields of these (``engine/profile_file.py``).
PLUGIN_ARGS: dict[str, PluginArgs] = {
    FragmentationDelta.name: FragmentationDelta.default_args,
    LookaheadStep.name: LookaheadStep.default_args,
    WORKLOAD: WorkloadArgs(),
    Energy.name: EnergyArgs(),
}
