"""The default policy never chooses a node or a card the filters reject, on random heterogeneous
clusters and request streams with departures, with and without a target workload, at either score
resolution."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Node, Request

from strategies import examples, nodes, requests

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(
    nodes(),
    st.lists(st.tuples(requests(), st.integers(0, 9)), min_size=1, max_size=25),
    st.integers(0, 3),
    st.booleans(),
    st.sampled_from(["xpupool", "xpupool-fine", "xpupool-greedy"]),
)
def test_every_replica_lands_on_a_node_and_cards_that_fit(
    cluster: list[Node],
    steps: list[tuple[Request, int]],
    seed: int,
    with_workload: bool,
    policy: str,
) -> None:
    workload = TargetWorkload.from_requests(r for r, _ in steps) if with_workload else None
    state = ClusterState(cluster, seed=seed)
    engine = Engine(state, policy, seed=seed, workload=workload)
    live: list[int] = []
    for req, release in steps:
        one = Request(
            req.name, req.cpu_milli, req.memory_mib, req.devices, queue=req.queue
        )  # one replica, so the state checked is the state it was placed on
        ctx = engine.feasible(one)
        fits = ctx.node_fit.copy()
        dev_fit = None if ctx.dev_fit is None else ctx.dev_fit.copy()
        placement = engine.place(one)
        assert placement.ok == bool(fits.any())
        for alloc in placement.allocations:
            assert fits[alloc.node_index]
            for share in alloc.devices:
                column = share.slot - alloc.node_index * state.width
                assert dev_fit is not None and dev_fit[alloc.node_index, column]
            live.append(alloc.id)
        if release < 3 and live:  # departures: about a third of the steps free something
            engine.release(live.pop(int(np.random.default_rng(release).integers(len(live)))))
