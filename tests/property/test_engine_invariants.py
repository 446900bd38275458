"""Invariants over random clusters and random place/release sequences.

- never more than 100 % of any device's memory or compute, or of any node's CPU or memory;
- what is free plus what live allocations hold equals capacity, exactly;
- releasing everything restores the state bit for bit;
- a gang places every replica or changes nothing;
- the same state, sequence, profile and seed give the same placements;
- the vectorised filter agrees with a plain per-device reference.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.engine.state import ClusterState as _State
from xpupool.model import Node, Request, Topology
from xpupool.model.taint import tolerated

from factories import capacity_arrays
from strategies import examples, nodes, requests

SETTINGS = settings(
    max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _check_capacity(state: _State) -> None:
    assert (state.dev_mem_free >= 0).all() and (state.dev_mem_free <= state.dev_mem_commit).all()
    assert (state.dev_core_free >= 0).all() and (state.dev_core_free <= state.dev_core_commit).all()
    assert (state.node_cpu_free >= 0).all() and (state.node_cpu_free <= state.node_cpu_total).all()
    assert (state.node_mem_free >= 0).all() and (state.node_mem_free <= state.node_mem_total).all()
    held_mem = np.zeros(state.dev_mem_total.size, np.int64)
    held_core = np.zeros(state.dev_mem_total.size, np.int64)
    held_tasks = np.zeros(state.dev_mem_total.size, np.int64)
    held_cpu = np.zeros(state.n_nodes, np.int64)
    for alloc in state.live.values():
        held_cpu[alloc.node_index] += alloc.cpu_milli
        for share in alloc.devices:
            held_mem[share.slot] += share.memory_mib
            held_core[share.slot] += share.core_permille
            held_tasks[share.slot] += 1
    assert np.array_equal(
        state.dev_mem_free.reshape(-1) + held_mem, state.dev_mem_commit.reshape(-1)
    )
    assert np.array_equal(
        state.dev_core_free.reshape(-1) + held_core, state.dev_core_commit.reshape(-1)
    )
    assert np.array_equal(
        state.dev_task_free.reshape(-1) + held_tasks, state.dev_task_total.reshape(-1)
    )
    assert np.array_equal(state.node_cpu_free + held_cpu, state.node_cpu_total)
    assert np.array_equal(state.node_dev_mem_free, state.dev_mem_free.sum(axis=1))
    assert np.array_equal(state.node_dev_core_free, state.dev_core_free.sum(axis=1))


@SETTINGS
@given(nodes(), st.lists(st.tuples(requests(), st.integers(0, 9)), max_size=25), st.integers(0, 3))
def test_random_sequences_never_overcommit_and_release_exactly(
    cluster: list[Node], steps: list[tuple[Request, int]], seed: int
) -> None:
    state = ClusterState(cluster, seed=seed)
    engine = Engine(state, seed=seed)
    initial = capacity_arrays(state)
    for req, release_roll in steps:
        before_free = state.dev_mem_free.copy()
        placement = engine.place(req)
        if req.gang and not placement.ok:
            assert placement.allocations == ()
            assert np.array_equal(state.dev_mem_free, before_free)
        if req.gang and placement.ok:
            assert len(placement.allocations) == req.replicas
        _check_capacity(state)
        if release_roll < 3 and state.live:
            engine.release(sorted(state.live)[release_roll % len(state.live)])
            _check_capacity(state)
    for alloc_id in sorted(state.live):
        engine.release(alloc_id)
    for name, array in initial.items():
        assert np.array_equal(getattr(state, name), array), name


@SETTINGS
@given(nodes(), st.lists(requests(), max_size=15), st.integers(0, 3))
def test_same_inputs_same_placements(cluster: list[Node], reqs: list[Request], seed: int) -> None:
    def run() -> list[object]:
        engine = Engine(ClusterState(cluster, seed=seed), seed=seed)
        out: list[object] = []
        for req in reqs:
            placement = engine.place(req)
            out.append([(a.node, a.device_uuids, a.devices) for a in placement.allocations])
            out.append([f.message for f in placement.failures])
        return out

    assert run() == run()


def _reference_fits(state: _State, req: Request, node: int) -> bool:
    """Plain Python: can one replica go on ``node``? Independent of the vectorised filters."""
    if not (state.node_ok[node] and state.node_cpu_free[node] >= req.cpu_milli):
        return False
    if state.node_mem_free[node] < req.memory_mib:
        return False
    if any(t.keeps_off and not tolerated(req.tolerations, t) for t in state.nodes[node].taints):
        return False
    d = req.devices
    if d.count == 0:
        return True
    nd = state.nodes[node]
    good_by_group: dict[object, int] = {}
    good_by_numa: dict[int, int] = {}
    good = 0
    for col, dev in enumerate(nd.devices):
        if not state.dev_usable[node, col]:
            continue
        if d.vendors and dev.vendor not in d.vendors:
            continue
        matches = [state.catalog.matches(t, dev.model, dev.vendor) for t in d.models]
        if d.models and not any(matches):
            continue
        if any(state.catalog.matches(t, dev.model, dev.vendor) for t in d.exclude_models):
            continue
        if dev.uuid in d.exclude_uuids or (d.uuids and dev.uuid not in d.uuids):
            continue
        if d.share_modes and dev.share_mode is not None and dev.share_mode not in d.share_modes:
            continue
        if any(
            state.compat.check(n, dev.vendor, dev.driver_version, dict(dev.runtimes)).name != "OK"
            for n in d.software
        ):
            continue
        if d.memory_mib is not None:
            need = d.memory_mib
        elif d.whole:  # all the card may commit (an untouched card)
            need = math.floor(dev.memory_mib * dev.memory_overcommit)
        else:  # a share of the physical card
            need = dev.memory_mib * (d.need_memory_permille or 0) // 1000
        tasks = sum(
            1
            for a in state.live.values()
            for share in a.devices
            if share.slot == node * state.width + col
        )
        if (
            state.dev_mem_free[node, col] < need
            or state.dev_core_free[node, col] < d.need_core_permille
            or (dev.max_tasks is not None and tasks >= dev.max_tasks)
        ):
            continue
        good += 1
        if dev.link_group is not None:
            good_by_group[dev.link_group] = good_by_group.get(dev.link_group, 0) + 1
        if dev.numa_node is not None:
            good_by_numa[dev.numa_node] = good_by_numa.get(dev.numa_node, 0) + 1
    if d.topology is Topology.SAME_LINK_GROUP and d.count > 1:
        return max(good_by_group.values(), default=0) >= d.count
    if d.topology is Topology.SAME_NUMA and d.count > 1:
        return max(good_by_numa.values(), default=0) >= d.count
    return good >= d.count


@SETTINGS
@given(st.one_of(nodes(), nodes(capacity=True)), st.lists(requests(), min_size=1, max_size=12))
def test_vectorised_filter_matches_reference(cluster: list[Node], reqs: list[Request]) -> None:
    state = ClusterState(cluster)
    engine = Engine(state)
    for req in reqs:
        fit = engine.feasible(req).node_fit
        expected = [_reference_fits(state, req, i) for i in range(state.n_nodes)]
        assert fit.tolist() == expected
        if not any(expected):
            failure = engine.explain(req)
            assert failure is not None
            assert sum(r.count for r in failure.reasons) == state.n_nodes
        engine.place(req)
