"""The one power model and compute normalisation (catalog/power.py): catalog figures, the linear
interpolation, live samples first, and the operator's overrides checked at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import CatalogFileError
from xpupool.catalog.accelerators import load_accelerators
from xpupool.catalog.operator_file import load_operator_catalog
from xpupool.catalog.power import CardFigures, Override, PowerModel


def test_compute_units_are_bf16_then_fp16_tflops() -> None:
    catalog = load_accelerators()
    power = PowerModel(catalog)
    a100 = catalog.lookup("A100-SXM4-80GB")
    p100 = catalog.lookup("P100-SXM2-16GB")
    assert a100 is not None and p100 is not None and p100.bf16_tflops is None
    assert power.compute_units("NVIDIA A100-SXM4-80GB") == a100.bf16_tflops
    assert power.compute_units("Tesla P100-SXM2-16GB") == p100.fp16_tflops
    assert power.figures("no such card").compute_units == 0.0


def test_watts_interpolate_by_utilisation_and_prefer_samples() -> None:
    card = CardFigures(compute_units=1.0, idle_watts=50.0, busy_watts=400.0)
    assert card.watts(0.0) == 50.0
    assert card.watts(100.0) == 400.0
    assert card.watts(50.0) == 225.0
    assert card.watts(250.0) == 400.0  # clamped
    assert card.watts(None) == 400.0  # held, use unreported: charged as working
    assert card.watts(10.0, sampled_w=123.0) == 123.0


def test_busy_watts_are_the_board_power_and_overrides_win() -> None:
    catalog = load_accelerators()
    h100 = catalog.lookup("H100-SXM5-80GB")
    assert h100 is not None and h100.tdp_watts
    plain = PowerModel(catalog)
    assert plain.figures("H100-SXM5-80GB").busy_watts == h100.tdp_watts
    over = PowerModel(catalog, (Override("H100-SXM5-80GB", compute_units=1000.0, idle_watts=70),))
    figures = over.figures("NVIDIA H100 80GB HBM3")  # an alias reaches the same model
    assert (figures.compute_units, figures.idle_watts) == (1000.0, 70.0)
    assert figures.busy_watts == h100.tdp_watts


def test_operator_file_accelerators_section(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("accelerators:\n  - {name: a100-sxm4-80gb, compute_units: 300}\n")
    found = load_operator_catalog(path).accelerators
    assert found == (Override("A100-SXM4-80GB", compute_units=300.0),)
    for text, field in [
        ("accelerators:\n  - {name: A100-SXM4-80GB}\n", "name"),
        ("accelerators:\n  - {name: A100-SXM4-80GB, compute_units: -1}\n", "compute_units"),
        ("accelerators:\n  - {name: T4, idle_watts: 90, busy_watts: 70}\n", "idle_watts"),
        ("accelerators:\n  - {name: T4, watts: 70}\n", "watts"),
        ("accelerators:\n  - {name: T4, idle_watts: 9}\n  - {name: t4, idle_watts: 8}\n", "name"),
    ]:
        path.write_text(text)
        with pytest.raises(CatalogFileError) as info:
            load_operator_catalog(path)
        assert info.value.field == field, str(info.value)


def test_with_overrides_is_a_snapshot_with_figures_layered_over() -> None:
    """What the plane hands its engine: this model's overrides and learned idle watts, further
    overrides over them figure by figure, and nothing this model learns afterwards."""
    power = PowerModel(overrides=(Override("A100-SXM4-80GB", busy_watts=380.0),))
    power.learn_idle({"NVIDIA A100-SXM4-80GB": 55.0})
    layered = power.with_overrides((Override("NVIDIA A100-SXM4-80GB", compute_units=100.0),))
    figures = layered.figures("NVIDIA A100-SXM4-80GB")
    assert (figures.compute_units, figures.idle_watts, figures.busy_watts) == (100.0, 55.0, 380.0)
    assert layered.idle_source("NVIDIA A100-SXM4-80GB") == "measured"
    power.learn_idle({"NVIDIA A100-SXM4-80GB": 70.0})
    assert power.figures("NVIDIA A100-SXM4-80GB").idle_watts == 70.0
    assert layered.figures("NVIDIA A100-SXM4-80GB").idle_watts == 55.0
