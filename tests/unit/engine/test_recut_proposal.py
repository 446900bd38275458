"""Which cards a re-cut rule may choose among: a scheme with the profile, nodes where the request's
CPU and memory fit, one node for a replica of several devices."""

from __future__ import annotations

from collections.abc import Sequence

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import recut_choice
from xpupool.engine.recut_proposal import PartitionCard, RecutRule, propose_recut
from xpupool.model import DeviceRequest, Node, Request

from factories import partition_scheme

A100 = partition_scheme("A100-SXM4-80GB")
EMPTY = TargetWorkload((), ())


def _rule(
    scheme: PartitionScheme, cards: Sequence[tuple[Layout, frozenset[Instance]]], profile: str
) -> tuple[int, Layout] | None:
    return recut_choice(scheme, cards, profile, EMPTY)


RULE: RecutRule = _rule


def _engine(*cpus: int) -> Engine:
    nodes = [Node(f"n{i}", cpu, 64 * 1024) for i, cpu in enumerate(cpus)]
    return Engine(ClusterState(nodes))


def _cards(node: str, n: int) -> list[PartitionCard]:
    return [PartitionCard(node, f"{node}-gpu{j}", A100, ()) for j in range(n)]


def _req(count: int, profile: str = "7g.80gb", cpu: int = 1000) -> Request:
    return Request("r", cpu, 1024, DeviceRequest(count=count, partition=profile))


def test_one_device_takes_one_card_on_a_node_with_room_for_the_cpu() -> None:
    engine = _engine(500, 8000)
    found = propose_recut(engine, [*_cards("n0", 1), *_cards("n1", 1)], _req(1), RULE)
    assert [(r.node, r.uuid, r.layout, r.destroyed) for r in found] == [
        ("n1", "n1-gpu0", (("7g.80gb", 0),), 0)
    ]


def test_several_devices_come_from_one_node() -> None:
    engine = _engine(8000, 8000)
    cards = [*_cards("n0", 1), *_cards("n1", 2)]
    found = propose_recut(engine, cards, _req(2), RULE)
    assert sorted(r.uuid for r in found) == ["n1-gpu0", "n1-gpu1"]
    assert propose_recut(engine, cards, _req(3), RULE) == ()


def test_every_replica_of_a_gang_gets_its_cards_or_none_does() -> None:
    engine = _engine(8000, 8000)
    cards = [*_cards("n0", 1), *_cards("n1", 2)]
    gang = Request("r", 1000, 1024, DeviceRequest(1, partition="7g.80gb"), replicas=3, gang=True)
    found = propose_recut(engine, cards, gang, RULE)
    assert sorted(r.uuid for r in found) == ["n0-gpu0", "n1-gpu0", "n1-gpu1"]
    two = Request("r", 1000, 1024, DeviceRequest(2, partition="7g.80gb"), replicas=2, gang=True)
    assert propose_recut(engine, cards, two, RULE) == ()  # a second node of two cards: none
    cards.append(PartitionCard("n0", "n0-gpu1", A100, ()))
    found = propose_recut(engine, cards, two, RULE)
    assert sorted(r.uuid for r in found) == ["n0-gpu0", "n0-gpu1", "n1-gpu0", "n1-gpu1"]


def test_nothing_for_a_request_of_no_partition_or_an_unknown_profile() -> None:
    engine = _engine(8000)
    cards = _cards("n0", 1)
    share = Request("r", 1000, 1024, DeviceRequest(count=1, core_permille=300))
    assert propose_recut(engine, cards, share, RULE) == ()
    assert propose_recut(engine, cards, _req(1, "1g.5gb"), RULE) == ()  # an A100-40GB profile


def test_a_busy_card_is_cut_around_what_runs_and_destroys_what_is_in_the_way() -> None:
    engine = _engine(8000)
    card = PartitionCard(
        "n0", "n0-gpu0", A100, (("3g.40gb", 0), ("3g.40gb", 4)), frozenset({("3g.40gb", 0)})
    )
    found = propose_recut(engine, [card], _req(1, "4g.40gb"), RULE)
    assert found == ()  # a 4g starts at 0 only, where a 3g runs
    found = propose_recut(engine, [card], _req(1, "2g.20gb"), RULE)
    assert len(found) == 1 and found[0].destroyed == 1
    assert ("3g.40gb", 0) in found[0].layout


def test_schemes_that_cut_alike_are_weighed_together_and_other_profiles_not_proposed() -> None:
    engine = _engine(8000, 8000)
    h100 = partition_scheme("H100-SXM5-80GB")
    cards = [PartitionCard("n0", "a", A100, ()), PartitionCard("n1", "h", h100, ())]
    seen: list[int] = []

    def last_card(
        scheme: PartitionScheme, given: Sequence[tuple[Layout, frozenset[Instance]]], profile: str
    ) -> tuple[int, Layout] | None:
        seen.append(len(given))
        return len(given) - 1, (("3g.40gb", 4),)  # another profile than the one asked

    assert propose_recut(engine, cards, _req(1, "4g.40gb"), last_card) == ()
    assert seen == [2]  # one call over both cards: the two schemes have one geometry
