"""Link groups: for each node, the most devices passing a mask that share one NVLink/HCCS domain.

Group ids are global and contiguous per node (assigned in node order), so the per-node maximum is one
``bincount`` and one ``maximum.reduceat`` over groups, with no loop over nodes.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine.state import BoolArray, ClusterState, IntArray


def best_group_count(state: ClusterState, mask: BoolArray) -> IntArray:
    """``[N]``: per node, the largest number of ``mask`` devices inside a single link group."""
    best = np.zeros(state.n_nodes, np.int64)
    n_groups = len(state.group_node)
    if n_groups == 0:
        return best
    in_group = mask & (state.dev_group >= 0)
    counts = np.bincount(state.dev_group[in_group], minlength=n_groups)
    best[state.group_owner_nodes] = np.maximum.reduceat(counts, state.group_starts)
    return best
