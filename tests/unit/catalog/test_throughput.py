"""Throughput knowledge: measured wins once two cards are measured, then declared, then the
roofline estimate; each figure says where it came from."""

from __future__ import annotations

import pytest

from xpupool.catalog.accelerators import load_accelerators
from xpupool.catalog.throughput import (
    MAX_STEP,
    REPORT_WINDOW,
    Source,
    ThroughputTable,
    card_speeds,
    describe,
    job_kind,
    roofline_tflops,
)

CATALOG = load_accelerators()


def _card(name: str):  # type: ignore[no-untyped-def]
    card = CATALOG.lookup(name)
    assert card is not None, name
    return card


def test_roofline_tracks_bandwidth_for_decode_and_compute_for_convolutions() -> None:
    v100, p100 = _card("V100-SXM2-16GB"), _card("P100-SXM2-16GB")
    decode = roofline_tflops(v100, "llm-decode") / roofline_tflops(p100, "llm-decode")  # type: ignore[operator]
    conv = roofline_tflops(v100, "resnet50") / roofline_tflops(p100, "resnet50")  # type: ignore[operator]
    assert decode == pytest.approx(900 / 732)  # bandwidth ratio
    assert conv > decode  # tensor cores count only where compute binds


def test_estimated_when_nothing_else_is_known() -> None:
    rows = card_speeds("resnet50", [_card("V100-SXM2-16GB"), _card("P100-SXM2-16GB")])
    assert [r.source for r in rows] == [Source.ESTIMATED, Source.ESTIMATED]
    assert rows[0].model == "V100-SXM2-16GB" and rows[0].speed == 1.0


def test_declared_beats_estimate_and_measured_beats_declared() -> None:
    cards = ["V100", "K80"]
    declared = [("V100", 2.0), ("K80", 1.0)]
    rows = card_speeds("rec", cards, declared)
    assert {r.model: (r.speed, r.source) for r in rows} == {
        "V100": (1.0, Source.DECLARED),
        "K80": (0.5, Source.DECLARED),
    }
    table = ThroughputTable()
    table.record("rec", "V100", 10.0)
    assert card_speeds("rec", cards, declared, table)[0].source is Source.DECLARED  # one card only
    for _ in range(3):
        table.record("rec", "k80", 20.0)
    rows = card_speeds("rec", cards, declared, table)
    assert [(r.model, r.speed, r.runs) for r in rows] == [("K80", 1.0, 3), ("V100", 0.5, 1)]
    assert describe(rows) == "K80: 1.0x, V100: 0.5x (measured, 4 runs)"


def test_uncovered_models_are_estimated_on_the_chosen_scale() -> None:
    rows = card_speeds(
        "x",
        ["V100", "P100", "K80"],
        [("V100", 4.0), ("P100", 2.0)],
        estimate={"V100": 2.0, "K80": 0.5},
    )
    by = {r.model: r for r in rows}
    assert by["K80"].source is Source.ESTIMATED and by["K80"].speed == pytest.approx(0.25)
    assert describe(rows) == "V100: 1.0x, P100: 0.5x (declared), K80: 0.25x (estimated)"


def test_bad_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        ThroughputTable().record("k", "V100", float("nan"))


def test_kind_falls_back_to_image_then_model() -> None:
    assert job_kind("resnet", "docker.io/a/b:1") == "resnet"
    assert job_kind(None, "docker.io/a/train:1.2") == "docker.io/a/train"
    assert job_kind(None, None, "qwen2.5-7b") == "qwen2.5-7b"
    assert job_kind(None) is None


def test_a_figure_follows_recent_reports_and_one_report_moves_it_a_bounded_step() -> None:
    table = ThroughputTable()
    table.record("k", "V100", 100.0)
    for _ in range(REPORT_WINDOW - 1):
        table.report("k", "V100", 100.0, new_run=False)
    hostile = table.report("k", "V100", 1e12, new_run=False)  # clipped to MAX_STEP x the figure
    assert hostile.rate == pytest.approx(100.0 + (100.0 * MAX_STEP - 100.0) / REPORT_WINDOW)
    assert (hostile.runs, hostile.reports) == (1, REPORT_WINDOW + 1)
    for _ in range(10 * REPORT_WINDOW):  # the job type got faster: the figure follows
        table.report("k", "V100", 200.0, new_run=False)
    assert table.measured("k")["V100"][0] == pytest.approx(200.0, rel=0.01)
