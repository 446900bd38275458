"""Hardware partitions in the engine: partition requests take a free instance of their profile,
whole and alone; every other request keeps off partitions; the refusals say why; the
fragmentation measure sees a free instance as usable only by a workload that asks for it."""

from __future__ import annotations

import pytest

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card
from xpupool.engine import ClusterState, Engine, Reason
from xpupool.engine.fragmentation import FragmentationCache, TargetWorkload
from xpupool.model import Device, Node, Request
from xpupool.model.errors import RequestError
from xpupool.model.spec import parse_spec

from factories import A100

LAYOUT = (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))


def cut(uuid: str, layout: tuple[tuple[str, int | None], ...] = LAYOUT) -> tuple[Device, ...]:
    card = Device(uuid, "nvidia", A100, 81920)
    return cut_card(card, layout, load_partitions(), load_accelerators())


def pool(*, plain: bool = True) -> Engine:
    devices = cut("GPU-p")
    if plain:
        devices = (*devices, Device("GPU-w", "nvidia", A100, 81920, index=1))
    return Engine(ClusterState([Node("n", 64_000, 512 * 1024, devices)]))


def taken(engine: Engine, spec: str) -> list[str]:
    placement = engine.place(parse_spec(spec))
    return [d.uuid for a in placement.allocations for d in a.devices]


def reasons(engine: Engine, spec: str) -> set[Reason]:
    failure = engine.explain(parse_spec(spec))
    assert failure is not None
    return {r.reason for r in failure.reasons}


def test_a_profile_takes_a_free_instance_of_it_whole() -> None:
    engine = pool()
    assert taken(engine, "A100 mig=3g.40gb") == ["MIG-GPU-p-0"]
    assert taken(engine, "A100 mig=3g.40gb") == []  # the one 3g instance is held
    assert taken(engine, "A100 mig=2g.20gb") == ["MIG-GPU-p-4"]
    assert Reason.INSUFFICIENT_DEVICE_MEMORY in reasons(engine, "A100 mig=3g.40gb")


def test_whole_and_share_requests_never_land_on_partitions() -> None:
    engine = pool(plain=False)
    for spec in ("A100", "A100 mem=5Gi", "A100 cores=10%", "any"):
        assert taken(engine, spec) == [], spec
        assert reasons(engine, spec) == {Reason.PARTITIONED}
    engine = pool()
    assert taken(engine, "A100 mem=5Gi") == ["GPU-w"]
    assert taken(engine, "A100 mem=5Gi") == ["GPU-w"]  # shares stay on the plain card


def test_a_partition_request_never_takes_a_plain_card() -> None:
    engine = pool()
    assert reasons(engine, "A100 mig=4g.40gb") == {Reason.PARTITION_PROFILE}
    assert taken(engine, "A100 mig=1g.10gb") == ["MIG-GPU-p-6"]
    assert taken(engine, "A100 mig=1g.10gb") == []


def test_isolated_memory_takes_the_smallest_profile_holding_it() -> None:
    engine = pool()
    assert taken(engine, "A100 mem=8Gi isolated") == ["MIG-GPU-p-6"]  # 1g.10gb
    # 20 GiB: the smallest profile is 1g.20gb, which this layout lacks: it waits, never a 2g
    assert reasons(engine, "A100 mem=20Gi isolated") == {Reason.PARTITION_PROFILE}
    engine2 = Engine(ClusterState([Node("m", 64_000, 512 * 1024, cut("GPU-q", (("1g.20gb", 0),)))]))
    assert taken(engine2, "A100 mem=20Gi isolated") == ["MIG-GPU-q-0"]


def test_release_gives_the_instance_back() -> None:
    engine = pool()
    placement = engine.place(parse_spec("A100 mig=3g.40gb"))
    engine.release(placement.allocations[0].id)
    assert taken(engine, "A100 mig=3g.40gb") == ["MIG-GPU-p-0"]


def test_a_layout_against_the_geometry_is_refused() -> None:
    with pytest.raises(RequestError) as info:
        cut("GPU-x", (("3g.40gb", 0), ("4g.40gb", 0)))
    assert info.value.field == "partitions"
    with pytest.raises(RequestError):
        cut_card(
            Device("GPU-t", "nvidia", "Tesla T4", 15360),
            (("1g.5gb", 0),),
            load_partitions(),
            load_accelerators(),
        )


def test_fragmentation_sees_free_instances_as_usable_only_by_their_profile() -> None:
    engine = pool(plain=False)
    asks_3g = TargetWorkload((parse_spec("A100 mig=3g.40gb"),), (1.0,))
    shares = TargetWorkload((parse_spec("A100 mem=5Gi"),), (1.0,))

    def frag(workload: TargetWorkload) -> float:
        return float(FragmentationCache(engine.state, engine.pipeline, workload).current()[0])

    # three free instances, 1000 idle each; a share can use none of them, a 3g asker one
    assert frag(shares) == pytest.approx(3000.0)
    assert frag(asks_3g) == pytest.approx(2000.0)
    engine.place(Request("x", devices=parse_spec("A100 mig=3g.40gb").devices))
    assert frag(asks_3g) == pytest.approx(2000.0)  # nothing a 3g asker can use is left
