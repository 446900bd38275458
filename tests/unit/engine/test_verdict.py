"""Requests no node could hold even on an empty pool, and the closest miss each names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xpupool.engine import ClusterState
from xpupool.engine.verdict import Verdicts
from xpupool.model import Request
from xpupool.model.request_model import RequestModel

from factories import T4, gpu_node


def pool() -> ClusterState:
    nodes = [
        gpu_node("a", count=8, group_size=4, cpu_milli=64_000),  # A100 80GB, link groups of 4
        gpu_node("t", model=T4, memory_mib=15360, count=4, group_size=0, cpu_milli=32_000),
    ]
    return ClusterState(nodes)


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("A100 mem=100Gi", "devices.memory", "the largest NVIDIA A100-SXM4-80GB card has 80Gi"),
        ("cpu=100", "cpu", "the largest node has 64 CPU; asked 100"),
        ("memory=1Ti", "memory", "the largest node has 512Gi memory; asked 1024Gi"),
        ("A100:9", "devices.count", "no node has more than 8 NVIDIA A100-SXM4-80GB cards"),
        ("T4:2 nvlink", "devices.topology", "Tesla T4 cards have no link group (PCIe only)"),
        ("A100:8 nvlink", "devices.topology", "the widest link group of NVIDIA A100"),
        (
            "24GB..40GB",
            "devices.card_memory",
            "no card of 24GB..40GB in the pool; it has 16GB, 80GB",
        ),
        (
            "H100",
            "devices.models",
            "no H100 card in the pool; it has NVIDIA A100-SXM4-80GB, Tesla T4",
        ),
        ("A100:8 replicas=2 gang", "replicas", "holds 1 replicas of this at once; asked 2"),
        ("A100:8 replicas=2", "replicas", "holds 1 replicas of this at once; asked 2"),
    ],
)
def test_the_closest_miss_names_the_field_and_the_numbers(
    text: str, field: str, reason: str
) -> None:
    miss = Verdicts(pool()).never_fits(ask(text))
    assert miss is not None and miss.field == field
    assert reason in miss.reason


def test_what_fits_an_empty_pool_has_no_verdict_whatever_is_held_now() -> None:
    state = pool()
    verdicts = Verdicts(state)
    for text in ("A100:8", "A100:4 nvlink", "T4 mem=5Gi replicas=12", "cpu=64"):
        assert verdicts.never_fits(ask(text)) is None, text


def test_cordoned_unhealthy_and_lost_nodes_still_count() -> None:
    state = pool()
    state.set_node_schedulable("a", False)
    for uuid in [f"a-gpu{i}" for i in range(8)]:
        state.set_device_health(uuid, False)
    assert Verdicts(state).never_fits(ask("A100:8")) is None


def test_an_empty_pool_says_nothing_and_the_twin_follows_the_inventory() -> None:
    state = ClusterState([])
    verdicts = Verdicts(state)
    assert verdicts.never_fits(ask("A100")) is None  # no nodes yet: they may be coming
    state.add_node(gpu_node("t", model=T4, memory_mib=15360, count=1))
    assert verdicts.never_fits(ask("A100")) is not None
    state.add_node(replace(gpu_node("a", count=1)))
    assert verdicts.never_fits(ask("A100")) is None


def test_the_twin_is_built_again_only_when_nodes_are_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cordon, a health change or a lost node bumps the state's epoch but changes nothing in
    the twin (every node counts there, schedulable and healthy): building it again would cost
    the next submission as much as the pool is large."""
    from xpupool.engine import verdict

    built: list[int] = []

    def counted(nodes: list[object], **kwargs: object) -> ClusterState:
        built.append(len(nodes))
        return ClusterState(nodes, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verdict, "ClusterState", counted)
    state = pool()
    verdicts = Verdicts(state)
    verdicts.warm()
    assert built == [2]
    state.set_node_schedulable("a", False)
    state.set_device_health("t-gpu0", False)
    state.set_device_cordoned("a-gpu0", True)
    assert verdicts.never_fits(ask("A100:8")) is None
    assert built == [2]
    state.add_node(gpu_node("b", count=1))
    assert verdicts.never_fits(ask("A100:8")) is None
    assert built == [2, 3]


def test_an_answer_is_kept_per_request_until_nodes_are_added() -> None:
    # A submission of a shape asked before costs a lookup, not the filters over every node
    # (issue 25); the answer is the same whatever the job's name, and nodes added ask again.
    state = pool()
    verdicts = Verdicts(state)
    too_big = ask("A100 mem=100Gi")
    first = verdicts.never_fits(too_big)
    assert first is not None and len(verdicts._answers) == 1
    assert verdicts.never_fits(replace(too_big, name="another-job")) is first
    assert verdicts.never_fits(ask("A100:2")) is None and len(verdicts._answers) == 2
    big = gpu_node("big", memory_mib=200 * 1024, count=1, group_size=0)
    state.add_node(big)
    assert verdicts.never_fits(too_big) is None  # a card of 200Gi joined
    assert len(verdicts._answers) == 1


def test_an_image_job_whose_cards_sit_only_on_nodes_without_a_runtime_never_fits() -> None:
    """The runtime is a static property of a node like its cards: an A100 image job in a pool
    whose only runtime is on the T4 node can never start (issue 42: it was accepted and waited
    for ever, '15 no container runtime')."""
    nodes = [
        gpu_node("a", count=8),  # A100, no runtime
        replace(gpu_node("t", model=T4, memory_mib=15360, count=4), container_runtime="podman"),
    ]
    verdicts = Verdicts(ClusterState(nodes))
    image_job = replace(ask("A100"), container=True)
    miss = verdicts.never_fits(image_job)
    assert miss is not None
    assert miss.field == "image"
    assert "no node with NVIDIA A100-SXM4-80GB cards has a container runtime" in miss.reason
    assert "t (Tesla T4)" in miss.reason  # where the runtimes are
    assert verdicts.never_fits(replace(ask("A100"), container=False)) is None  # a command fits
    assert verdicts.never_fits(replace(ask("T4"), container=True)) is None


def test_an_image_job_in_a_pool_without_any_runtime_names_the_runtime() -> None:
    verdicts = Verdicts(ClusterState([gpu_node("a", count=8)]))
    miss = verdicts.never_fits(replace(ask("A100"), container=True))
    assert miss is not None
    assert (miss.field, miss.reason) == ("image", "no node of the pool has a container runtime")
