"""Over-commit factors and task limits are never exceeded, whatever arrives and leaves.

On random clusters whose cards carry random task limits and over-commit factors, random
place/release sequences never grant a card more than ``floor(memory x factor)`` MiB, more than
``floor(1000 x factor)`` thousandths or more tasks than its limit, a whole card is never shared,
and releasing everything gives back the state bit for bit. The bounds are computed here from the
Device records, independently of the state's arrays.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.model import Node, Request

from factories import capacity_arrays
from strategies import examples, nodes, requests

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _check_bounds(state: ClusterState, whole: set[int]) -> None:
    """``whole``: ids of live allocations that took whole cards."""
    held: dict[int, list[tuple[int, int, int]]] = {}
    for alloc in state.live.values():
        for share in alloc.devices:
            held.setdefault(share.slot, []).append(
                (share.memory_mib, share.core_permille, alloc.id)
            )
    for i, node in enumerate(state.nodes):
        for col, dev in enumerate(node.devices):
            shares = held.get(i * state.width + col, [])
            assert sum(m for m, _, _ in shares) <= math.floor(
                dev.memory_mib * dev.memory_overcommit
            )
            assert sum(c for _, c, _ in shares) <= math.floor(1000 * dev.cores_overcommit)
            if dev.max_tasks is not None:
                assert len(shares) <= dev.max_tasks
            if any(a in whole for _, _, a in shares):
                assert len(shares) == 1, "a whole card is shared"


@SETTINGS
@given(
    nodes(capacity=True),
    st.lists(st.tuples(requests(), st.integers(0, 9)), max_size=30),
    st.sampled_from(["binpack", "spread", "xpupool"]),
)
def test_random_sequences_never_exceed_the_factors_or_the_task_limits(
    cluster: list[Node], steps: list[tuple[Request, int]], profile: str
) -> None:
    state = ClusterState(cluster, seed=1)
    engine = Engine(state, profile, seed=1)
    initial = capacity_arrays(state)
    whole: set[int] = set()
    for req, roll in steps:
        placement = engine.place(req)
        if req.devices.whole:
            whole.update(a.id for a in placement.allocations)
        _check_bounds(state, whole)
        if roll < 4 and state.live:
            engine.release(sorted(state.live)[roll % len(state.live)])
            _check_bounds(state, whole)
    for alloc_id in sorted(state.live):
        engine.release(alloc_id)
    for name, array in initial.items():
        assert np.array_equal(getattr(state, name), array), name
