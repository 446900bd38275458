"""The pod annotations a bind writes: HAMi's, per device type, so that HAMi's device plugin and
in-container limiter take the shares xpupool chose, and so that any scheduler (a restarted
extender, HAMi's own) charges the pod to them from its ``allocated`` annotation."""

from __future__ import annotations

import time
from collections.abc import Sequence

from xpupool.k8s.codec import hami
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.model.allocation import Allocation


def assignment_annotations(
    node: str,
    demand: PodDemand,
    allocations: Sequence[Allocation],
    now_unix: int | None = None,
) -> dict[str, str]:
    """``allocations`` (one per container of ``demand.demands``, in that order) as HAMi's
    annotations: for each device type the pod asks for, one entry per container of the pod
    (HAMi's order, init containers first), empty for containers that ask for none of it."""
    if len(allocations) != len(demand.demands):
        raise ValueError(f"{len(allocations)} allocations for {len(demand.demands)} containers")
    now = int(time.time()) if now_unix is None else now_unix
    out: dict[str, str] = {}
    kinds = {d.kind.hami_type: d.kind for d in demand.demands}
    for kind in kinds.values():
        containers: list[list[hami.ContainerDevice]] = [[] for _ in demand.containers]
        for d, alloc in zip(demand.demands, allocations, strict=True):
            if d.kind is kind:
                containers[d.index] = [hami.container_device(s, kind) for s in alloc.devices]
        out.update(hami.assignment_annotations(kind, containers, node, now))
    return out
