"""The dashboard's pure parts: chart geometry and what a card's tile says."""

from __future__ import annotations

from xpupool.server import schemas as s
from xpupool.server.web.charts import bar_chart, sparkline
from xpupool.server.web.devices import tile


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


def _device(**kw: object) -> s.Device:
    base: dict[str, object] = {
        "uuid": "u", "node": "n", "site": "x", "index": 3, "vendor": "nvidia", "model": "L20",
        "canonical_model": "L20", "memory_mib": 1000, "driver_version": None, "runtimes": {},
        "link_group": None, "healthy": True, "cordoned": False, "allocated_memory_mib": 0,
        "allocated_core_permille": 0, "committable_memory_mib": 1000,
        "committable_core_permille": 1000,
    }  # fmt: skip
    return s.Device.model_validate(base | kw)


def test_a_tile_fills_by_allocation_and_borders_by_utilisation() -> None:
    t = tile(_device(allocated_memory_mib=250, allocated_core_permille=600))
    assert (t["a"], t["u"]) == (6, 0)  # the larger share of memory and compute
    assert t["label"] == "card 3 L20, 60% allocated, utilisation unknown"
    metrics = s.DeviceMetrics(uuid="u", utilization_pct=87.0)
    t = tile(_device(metrics=metrics, cordoned=True, healthy=False))
    assert (t["a"], t["u"]) == (0, 9)
    assert t["label"].endswith("utilisation 87%, cordoned, unhealthy")
    over = tile(_device(allocated_memory_mib=1500, committable_memory_mib=1500))
    assert over["a"] == 10  # over-committed memory counts against what may be granted
