"""One profile's filter chain: which of the registry's filters run, in the registry's order.

Filters are per profile (a profile may turn off a selector check such as ``DeviceUuid``), but the
capacity checks always run, so the chain keeps the registry's order and only leaves some out. The
static device filters' names are part of the key under which the pipeline caches a request's
eligible devices: two profiles that disagree on a static filter never share a cached mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.engine.filters.base import DeviceFilter, NodeFilter
from xpupool.engine.filters.topology import GroupFilter
from xpupool.model.request import Topology


@dataclass(frozen=True, slots=True)
class FilterChain:
    """``node[0]`` is always ``NodeSchedulable`` (the pipeline reads it from ``state.node_ok``) and
    ``dynamic[0]`` always ``DeviceMemory`` (explanations insert the caller's restriction before it);
    ``groups`` are the topology checks the profile keeps (:meth:`group_for`). ``static_key`` names
    the static device filters that run, for the eligible-mask cache."""

    node: tuple[NodeFilter, ...]
    static: tuple[DeviceFilter, ...]
    dynamic: tuple[DeviceFilter, ...]
    groups: tuple[GroupFilter, ...]
    static_key: str

    def group_for(self, topology: Topology, k: int) -> GroupFilter | None:
        """The topology check a replica of ``k`` devices under ``topology`` must pass, if any."""
        for group in self.groups:
            if group.applies(topology, k):
                return group
        return None

    @property
    def dynamic_names(self) -> tuple[str, ...]:
        """The capacity checks that run, in order."""
        return tuple(f.name for f in self.dynamic)

    @property
    def names(self) -> tuple[str, ...]:
        """Every filter that runs, in order."""
        return (
            *(f.name for f in self.node),
            *(f.name for f in (*self.static, *self.dynamic)),
            *(f.name for f in self.groups),
        )
