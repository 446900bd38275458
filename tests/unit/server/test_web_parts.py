"""The dashboard's pure parts: chart geometry, what a card's tile says, and counted words."""

from __future__ import annotations

import re

from xpupool.server.auth import Principal
from xpupool.server.schemas.agent_protocol import DeviceMetrics
from xpupool.server.schemas.devices import Device
from xpupool.server.schemas.nodes import Node, NodeStatus
from xpupool.server.web.charts import bar_chart, sparkline
from xpupool.server.web.devices import tile
from xpupool.server.web.render import counted, render
from xpupool.server.web.sessions import Session
from xpupool.server.web.viewer import Viewer


def test_bars_scale_to_the_largest_and_keep_their_numbers() -> None:
    chart = bar_chart([("a", 10), ("b", 5), ("c", 0)])
    assert [(b.label, b.value, b.width) for b in chart.bars] == [
        ("a", 10, 320.0),
        ("b", 5, 160.0),
        ("c", 0, 0.0),
    ]
    assert bar_chart([]).bars == []


def test_a_sparkline_spans_its_box_oldest_left_lowest_at_the_bottom() -> None:
    spark = sparkline([(20.0, 50.0), (10.0, 0.0), (30.0, 100.0)], width=100, height=24)
    points = [tuple(map(float, p.split(","))) for p in spark.points.split()]
    assert [x for x, _ in points] == [0.0, 50.0, 100.0]
    assert points[0][1] == 22.0 and points[2][1] == 2.0  # 2 px inside the box
    assert (spark.low, spark.high, spark.last) == (0.0, 100.0, 100.0)
    one = sparkline([(5.0, 40.0)])
    assert len(one.points.split()) == 2 and one.last == 40.0  # a flat line, not a dot
    empty = sparkline([])
    assert (empty.points, empty.low, empty.high, empty.last) == ("", None, None, None)


def _device(**kw: object) -> Device:
    base: dict[str, object] = {
        "uuid": "u", "node": "n", "site": "x", "index": 3, "vendor": "nvidia", "model": "L20",
        "canonical_model": "L20", "memory_mib": 1000, "driver_version": None, "runtimes": {},
        "link_group": None, "healthy": True, "cordoned": False, "allocated_memory_mib": 0,
        "allocated_core_permille": 0, "committable_memory_mib": 1000,
        "committable_core_permille": 1000,
    }  # fmt: skip
    return Device.model_validate(base | kw)


def test_a_tile_fills_by_allocation_and_borders_by_utilisation() -> None:
    t = tile(_device(allocated_memory_mib=250, allocated_core_permille=600))
    assert (t["a"], t["u"]) == (6, 0)  # the larger share of memory and compute
    assert t["label"] == "card 3 L20, 60% allocated, utilisation unknown"
    metrics = DeviceMetrics(uuid="u", utilization_pct=87.0)
    t = tile(_device(metrics=metrics, cordoned=True, healthy=False))
    assert (t["a"], t["u"]) == (0, 9)
    assert t["label"].endswith("utilisation 87%, cordoned, unhealthy")
    over = tile(_device(allocated_memory_mib=1500, committable_memory_mib=1500))
    assert over["a"] == 10  # over-committed memory counts against what may be granted


def test_an_unhealthy_tile_is_hatched_and_names_its_cause_a_warning_only_names_it() -> None:
    sick = tile(
        _device(healthy=False, cordoned=True, health="unhealthy", health_cause="xid-79: off bus")
    )
    assert "unhealthy" in sick["classes"].split()  # the CSS hatching
    assert sick["label"].endswith("cordoned, unhealthy: xid-79: off bus")  # the tile's title
    warned = tile(_device(health="warning", health_cause="xid-13: graphics engine exception"))
    assert "unhealthy" not in warned["classes"].split()
    assert warned["label"].endswith("warning: xid-13: graphics engine exception")


def _node(schedulable: bool, status: NodeStatus = NodeStatus.READY) -> Node:
    return Node(
        name="n", site="x", status=status, schedulable=schedulable, source="agent",
        cpu_milli=1000, memory_mib=1024, cpu_allocated_milli=0, memory_allocated_mib=0,
        labels={}, arch="x86_64", os="linux", devices=1, devices_free=1, last_heartbeat=None,
    )  # fmt: skip


def test_the_tiles_of_a_cordoned_or_lost_node_say_so() -> None:
    """An idle card of a cordoned node takes no work: its tile is marked (a class the style
    dashes) and says so in words, as a cordoned card's does; a lost node's cards are hatched."""
    idle = tile(_device(), _node(schedulable=True))
    assert idle["classes"] == "tile a0 u0"
    closed = tile(_device(), _node(schedulable=False))
    assert closed["classes"] == "tile a0 u0 cordoned"
    assert closed["label"].endswith("utilisation unknown, node cordoned")
    lost = tile(_device(), _node(schedulable=False, status=NodeStatus.LOST))
    assert lost["classes"] == "tile a0 u0 unhealthy"
    assert lost["label"].endswith("utilisation unknown, node lost")
    card = tile(_device(cordoned=True, healthy=False), _node(schedulable=True))
    assert card["classes"] == "tile a0 u0 cordoned unhealthy"


def test_a_count_of_one_is_singular() -> None:
    assert [counted(n, "card") for n in (0, 1, 1.0, 2, 2.5, None)] == [
        "0 cards", "1 card", "1 card", "2 cards", "2.5 cards", "—",
    ]  # fmt: skip
    assert counted("1", "sample") == "1 sample"  # another filter's text, e.g. |cards


def test_the_overview_says_1_card_not_1_cards() -> None:
    viewer = Viewer(Principal(1, "tenant", "team"), Session("sid", "digest", "csrf", 0.0))
    ov = {
        "jobs": {"pending": 1, "running": 0},
        "stranded": {"memory_mib": 0, "core_pct": 100.0},
        "generated_at": 0.0,
        "pending_by_reason": {},
        "domains": [],
    }
    html = render(
        "overview_live.html",
        viewer=viewer,
        ov=ov,
        totals={"devices_total": 1, "devices_allocated": 0, "devices_busy": 0},
        by_site=[],
        by_model=[],
        site_chart=bar_chart([]),
        reason_chart=bar_chart([]),
    )
    assert re.search(r'id="stranded-cores">1 card<', html), html


def test_a_partitions_tile_names_its_profile_place_and_card() -> None:
    mig = tile(_device(partition="3g.40gb", partition_of="GPU-c", partition_start=4))
    assert mig["label"].startswith("card 3 L20 partition 3g.40gb@4 of GPU-c, 0% allocated")
    vnpu = tile(_device(partition="vir05_1c_16g", partition_of="NPU-c"))
    assert vnpu["label"].startswith("card 3 L20 partition vir05_1c_16g of NPU-c,")
