"""Device groups inside a node: link groups (NVLink/HCCS domains) and NUMA nodes; for each node,
the most devices passing a mask that share one group.

A topology constraint names the grouping it needs (``same-link-group``: link groups, ``same-numa``:
NUMA nodes). Group ids are global and contiguous per node (assigned in node order), so the per-node
maximum is one ``bincount`` and one ``maximum.reduceat`` over groups, with no loop over nodes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.model.request import Topology


def device_groups(state: ClusterState, topology: Topology) -> npt.NDArray[np.int32]:
    """``[N, W]`` each device's group under ``topology`` (-1: in none): NUMA nodes for
    ``same-numa``, link groups otherwise (what a request without a constraint prefers)."""
    return state.dev_numa if topology is Topology.SAME_NUMA else state.dev_group


def best_group_count(
    state: ClusterState, mask: BoolArray, topology: Topology = Topology.SAME_LINK_GROUP
) -> IntArray:
    """``[N]``: per node, the largest number of ``mask`` devices inside a single group of
    ``topology``'s grouping (:func:`device_groups`)."""
    best = np.zeros(state.n_nodes, np.int64)
    if topology is Topology.SAME_NUMA:
        dev, owners, starts = state.dev_numa, state.numa_owner_nodes, state.numa_starts
        n_groups = len(state.numa_group_node)
    else:
        dev, owners, starts = state.dev_group, state.group_owner_nodes, state.group_starts
        n_groups = len(state.group_node)
    if n_groups == 0:
        return best
    in_group = mask & (dev >= 0)
    counts = np.bincount(dev[in_group], minlength=n_groups)
    best[owners] = np.maximum.reduceat(counts, starts)
    return best
