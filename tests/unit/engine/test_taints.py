"""Taints and tolerations in the engine, and CPU-only work kept off accelerator nodes (issue 42,
part 3): the NodeTaints filter and its reason, the taint-toleration and avoid-devices scorers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.context import Context
from xpupool.engine.filters.node_taints import NodeTaints
from xpupool.engine.fragmentation.measure import TargetWorkload
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.profile import BUILTIN_PROFILES
from xpupool.engine.reasons import Reason
from xpupool.engine.scorers.base import MAX_SCORE, MIN_SCORE
from xpupool.engine.scorers.cpu_only import CpuOnly
from xpupool.engine.scorers.taint_toleration import TaintToleration
from xpupool.engine.verdict import Verdicts
from xpupool.model import Node, Request
from xpupool.model.request_model import RequestModel
from xpupool.model.taint import parse_taint

from factories import cpu_node, gpu_node


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_a_cpu_only_job_takes_a_free_cpu_node_not_an_a100_node(profile: str) -> None:
    # The A100 node comes first in every tie order that matters: binpack prefers it (fuller
    # after the first job), and it is the first node; the CPU-only node is free all along.
    state = ClusterState([gpu_node("a100-0"), gpu_node("a100-1"), cpu_node("cpu-0")], seed=0)
    asks = [ask("A100:1 cpu=1 name=warm"), *(ask(f"cpu=1 name=c{i}") for i in range(4))]
    engine = Engine(state, profile, seed=0, workload=TargetWorkload.from_requests(asks))
    engine.place(asks[0])
    placed = [engine.place(req).allocations[0].node for req in asks[1:]]
    assert placed == ["cpu-0"] * 4


def test_cpu_only_work_takes_a_gpu_node_when_no_cpu_only_node_fits() -> None:
    # a preference, not a constraint: with the CPU-only node full, the job still runs
    state = ClusterState([gpu_node("a100-0"), cpu_node("cpu-0", cpu_milli=2000)], seed=0)
    engine = Engine(state, "binpack", seed=0)
    placed = [engine.place(ask(f"cpu=1 name=c{i}")).allocations[0].node for i in range(3)]
    assert placed == ["cpu-0", "cpu-0", "a100-0"]


def test_requests_with_devices_and_all_gpu_pools_are_scored_as_before() -> None:
    # The cpu-only scorer says nothing (None) where it cannot tell the candidates apart, so the
    # profile's other scorers alone decide, bit for bit.
    scorer = CpuOnly()
    mixed = ClusterState([gpu_node("a100-0"), cpu_node("cpu-0")], seed=0)
    gpus = ClusterState([gpu_node("a100-0"), gpu_node("a100-1")], seed=0)
    for state, text, expect in (
        (mixed, "A100:1", None),  # asks for a device
        (gpus, "cpu=1", None),  # every node has cards
        (mixed, "cpu=1", [0.0, 100.0]),
    ):
        ctx = context(state, ask(text))
        got = scorer.score(ctx)
        assert (got if got is None else got.tolist()) == expect
    ctx = context(mixed, ask("cpu=64"))  # only the GPU node is big enough: nothing to tell apart
    assert scorer.score(ctx) is None


def context(state: ClusterState, req: Request) -> Context:
    pipe = Pipeline(state)
    ctx = pipe.context(req)
    pipe.filter(ctx)
    return ctx


def tainted(node: Node, *taints: str) -> Node:
    return replace(node, taints=tuple(parse_taint("taints", t) for t in taints))


def tainted_pool() -> ClusterState:
    """gpu-0 tainted gpu=true:NoSchedule, infra-0 dedicated=infra:NoSchedule, soft-0 with a
    PreferNoSchedule taint, plain-0 untainted: all alike otherwise."""
    return ClusterState(
        [
            tainted(gpu_node("gpu-0", count=2), "gpu=true:NoSchedule"),
            tainted(gpu_node("infra-0", count=2), "dedicated=infra:NoSchedule"),
            tainted(gpu_node("soft-0", count=2), "spot:PreferNoSchedule"),
            gpu_node("plain-0", count=2),
        ],
        seed=0,
    )


def names(state: ClusterState, mask: np.ndarray) -> set[str]:
    return {state.node_names[i] for i in np.flatnonzero(mask)}


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("A100:1", {"soft-0", "plain-0"}),  # PreferNoSchedule keeps nothing off
        ("A100:1 tolerate=gpu=true:NoSchedule", {"gpu-0", "soft-0", "plain-0"}),
        ("A100:1 tolerate=gpu=true", {"gpu-0", "soft-0", "plain-0"}),  # every effect
        ("A100:1 tolerate=gpu", {"gpu-0", "soft-0", "plain-0"}),  # Exists: any value
        ("A100:1 tolerate=gpu:NoSchedule", {"gpu-0", "soft-0", "plain-0"}),
        ("A100:1 tolerate=gpu=false", {"soft-0", "plain-0"}),  # Equal: this value only
        ("A100:1 tolerate=gpu=true:PreferNoSchedule", {"soft-0", "plain-0"}),  # other effect
        ("A100:1 tolerate=gpu tolerate=dedicated=infra", {"gpu-0", "infra-0", "soft-0", "plain-0"}),
        ("A100:1 tolerate=*", {"gpu-0", "infra-0", "soft-0", "plain-0"}),  # empty key, Exists
        ("A100:1 tolerate=*:NoSchedule", {"gpu-0", "infra-0", "soft-0", "plain-0"}),
        ("A100:1 tolerate=*:PreferNoSchedule", {"soft-0", "plain-0"}),
        ("cpu=1", {"soft-0", "plain-0"}),  # CPU-only work too
    ],
)
def test_no_schedule_taints_keep_off_what_does_not_tolerate_them(
    text: str, nodes: set[str]
) -> None:
    state = tainted_pool()
    mask = NodeTaints().node_mask(ask(text), state)
    assert mask is not None and names(state, mask) == nodes
    engine = Engine(state, "binpack", seed=0)
    assert engine.place(ask(text)).allocations[0].node in nodes


def test_an_untainted_pool_skips_the_filter() -> None:
    state = ClusterState([tainted(gpu_node("soft-0"), "spot:PreferNoSchedule")], seed=0)
    assert NodeTaints().node_mask(ask("A100:1"), state) is None


def test_the_explanation_counts_each_untolerated_taint_apart() -> None:
    state = tainted_pool()
    engine = Engine(state, "binpack", seed=0)
    for _ in range(2):  # fill the two nodes the request may use
        engine.place(ask("A100:2"))
    placement = engine.place(ask("A100:2 name=late"))
    assert not placement.ok
    message = placement.failures[0].message
    assert "1 untolerated taint gpu=true:NoSchedule" in message, message
    assert "1 untolerated taint dedicated=infra:NoSchedule" in message, message
    assert "2 insufficient device memory" in message, message
    codes = engine.pipeline.blame(context(state, ask("A100:2 name=late")))
    assert sorted(codes.tolist()).count(int(Reason.UNTOLERATED_TAINT)) == 2


def test_a_request_only_taints_keep_off_waits_and_is_not_refused_for_ever() -> None:
    # An admin may take a taint off as they uncordon a node: the request is not one that could
    # never fit (no 422 at submission); it waits, its reason naming the taint.
    state = ClusterState([tainted(gpu_node("gpu-0"), "gpu=true:NoSchedule")], seed=0)
    assert Verdicts(state).never_fits(ask("A100:1")) is None
    placement = Engine(state, "binpack", seed=0).place(ask("A100:1"))
    assert placement.failures[0].message == "0/1 nodes fit: 1 untolerated taint gpu=true:NoSchedule"


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_prefer_no_schedule_is_avoided_while_another_node_fits(profile: str) -> None:
    state = ClusterState(
        [
            tainted(gpu_node("soft-0", count=2), "spot:PreferNoSchedule"),
            tainted(
                gpu_node("soft-1", count=2), "spot:PreferNoSchedule", "old=yes:PreferNoSchedule"
            ),
            gpu_node("plain-0", count=2),
        ],
        seed=0,
    )
    asks = [ask(f"A100:1 name=j{i}") for i in range(6)]
    engine = Engine(state, profile, seed=0, workload=TargetWorkload.from_requests(asks))
    placed = [engine.place(req).allocations[0].node for req in asks]
    # the untainted node first, then the one with fewer untolerated taints, then the other
    assert placed == ["plain-0", "plain-0", "soft-0", "soft-0", "soft-1", "soft-1"]


def test_a_tolerated_prefer_no_schedule_taint_is_not_avoided() -> None:
    state = ClusterState(
        [
            tainted(gpu_node("soft-0", count=2), "spot:PreferNoSchedule"),
            gpu_node("plain-0", count=2),
        ],
        seed=0,
    )
    scorer = TaintToleration()
    assert scorer.score(context(state, ask("A100:1 tolerate=spot"))) is None
    assert scorer.score(context(state, ask("A100:1 tolerate=spot:NoSchedule"))) is not None
    got = scorer.score(context(state, ask("A100:1")))
    assert got is not None and got.tolist() == [MIN_SCORE, MAX_SCORE]


def test_taints_keep_off_cpu_only_nodes_too_and_the_preference_follows() -> None:
    # A CPU-only node tainted NoSchedule takes only the CPU-only work that tolerates it; the
    # rest goes to the GPU node, as it must.
    state = ClusterState(
        [gpu_node("a100-0"), tainted(cpu_node("cpu-0"), "team=etl:NoSchedule")], seed=0
    )
    engine = Engine(state, "xpupool", seed=0)
    assert engine.place(ask("cpu=1")).allocations[0].node == "a100-0"
    assert engine.place(ask("cpu=1 tolerate=team=etl")).allocations[0].node == "cpu-0"
