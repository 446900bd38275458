"""Choose the devices inside the chosen node.

Binpack takes the busiest cards that fit (whole cards stay whole for later whole-card jobs) and,
among link groups, the one with the fewest free fitting cards (full NVLink domains stay intact).
Spread does the opposite. A multi-device replica first looks for one link group that can hold all of
its devices; with ``same-link-group`` that is required (the filter guaranteed such a group exists).
With ``same-numa`` the groups are the node's NUMA nodes, and one of them is required likewise.
Works on one node's row (at most a few dozen devices), so plain Python is the fast choice here.
"""

from __future__ import annotations

from xpupool.engine.context import Context
from xpupool.engine.topology import device_groups
from xpupool.model.request import DevicePolicy, Topology


def pick_devices(ctx: Context, node: int, policy: DevicePolicy) -> list[int]:
    """Columns (within the node's row) of the ``ctx.k`` devices to use; deterministic."""
    assert ctx.dev_fit is not None
    s = ctx.state
    # One row as Python lists: a few dozen values, read many times by the sort keys below.
    cols: list[int] = ctx.dev_fit[node].nonzero()[0].tolist()
    topology = ctx.req.devices.topology
    group: list[int] = device_groups(s, topology)[node].tolist()
    group_fit: dict[int, int] = {}  # fitting cards per link group (a Counter costs more here)
    for c in cols:
        g = group[c]
        if g >= 0:
            group_fit[g] = group_fit.get(g, 0) + 1
    sign = 1 if policy is DevicePolicy.BINPACK else -1

    # Busiest card in the resource the replica asks for (compute, or memory for memory-only shares);
    # equal cards go to the lowest index, as best-fit GPU allocators do.
    primary: list[int] = (s.dev_core_free if ctx.need_core > 0 else s.dev_mem_free)[node].tolist()

    def key(c: int) -> tuple[int, int, int]:
        g = group[c]
        in_group = group_fit[g] if g >= 0 else 0
        return (sign * in_group, sign * primary[c], c)

    k = ctx.k
    if k > 1 and group_fit:
        roomy = [g for g, n in group_fit.items() if n >= k]
        if roomy:
            chosen = min(roomy, key=lambda g: (sign * group_fit[g], g))
            members = [c for c in cols if group[c] == chosen]
            return sorted(members, key=key)[:k]
        assert topology is Topology.NONE
    if k == 1:  # the first in that order (keys end with the column: no two are equal)
        return [min(cols, key=key)]
    return sorted(cols, key=key)[:k]
