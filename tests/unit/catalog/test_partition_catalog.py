"""The packaged partition schemes: every partitionable model the issue names, with its vendor
geometry, a cited source, and strict loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import load_accelerators
from xpupool.catalog.partitions import load_partitions
from xpupool.model.errors import CatalogError


def test_each_named_model_has_its_profiles() -> None:
    catalog = load_partitions()
    acc = load_accelerators()
    expected = {
        "NVIDIA A100-SXM4-40GB": ("1g.5gb", "7g.40gb"),
        "NVIDIA A100-SXM4-80GB": ("1g.10gb+me", "3g.40gb", "4g.40gb", "7g.80gb"),
        "NVIDIA A30": ("1g.6gb", "2g.12gb+me", "4g.24gb"),
        "NVIDIA H100 80GB HBM3": ("1g.10gb", "7g.80gb"),
        "NVIDIA H100 NVL": ("1g.12gb", "3g.47gb", "7g.94gb"),
        "NVIDIA H200": ("1g.18gb", "3g.71gb", "7g.141gb"),
        "910B3": ("vir05_1c_16g", "vir10_3c_32g"),
        "910B2": ("vir03_1c_8g", "vir06_1c_16g", "vir12_3c_32g"),
        "310P3": ("vir01", "vir02", "vir04"),
        "910A": ("vir02", "vir16"),
    }
    for printed, names in expected.items():
        scheme = catalog.scheme_for(printed, catalog=acc)
        assert scheme is not None, printed
        for name in names:
            assert scheme.profile(name) is not None, (printed, name)
        assert scheme.source.startswith("https://")
    assert catalog.scheme_for("Tesla T4", catalog=acc) is None
    a100 = catalog.scheme_for("A100-SXM4-80GB")
    assert a100 is not None and a100.profile("3g.20gb") is None


def test_mig_geometry_follows_the_guide() -> None:
    a100 = load_partitions().scheme_for("A100-SXM4-40GB")
    assert a100 is not None and a100.compute_slices == 7 and a100.memory_slices == 8
    three = a100.profile("3g.20gb")
    assert three is not None
    assert (three.compute, three.memory_slices, three.starts, three.max_instances) == (
        3,
        4,
        (0, 4),
        2,
    )
    assert three.memory_mib == 20 * 1024


def test_smallest_holding_takes_the_fewest_slices() -> None:
    a100 = load_partitions().scheme_for("A100-SXM4-80GB")
    assert a100 is not None
    found = a100.smallest_holding(20 * 1024)
    assert found is not None and found.name == "1g.20gb"
    assert a100.smallest_holding(81 * 1024) is None
    b3 = load_partitions().scheme_for("910B3")
    assert b3 is not None
    found = b3.smallest_holding(20 * 1024)
    assert found is not None and found.name == "vir10_3c_32g"


def test_a_malformed_file_names_entry_and_field(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "schemes:\n  - models: [X1]\n    kind: mig\n    compute_slices: 7\n    memory_slices: 8\n"
        "    source: https://example.com\n    section: s\n    profiles:\n"
        "      - {name: 1g.5gb, compute: 1, memory: 2, memory_gib: 5, starts: [7], max_instances: 1}\n"
    )
    with pytest.raises(CatalogError) as info:
        load_partitions(path)
    assert "starts" in str(info.value) and "profiles[0]" in str(info.value)


def test_an_isolated_request_gets_the_memory_nvml_reports_not_the_name_s() -> None:
    """On the lent H200 (docs/hardware-validation.md, 2026-11-30) NVML answered 16,384 MiB for
    1g.18gb, 33,280 for 1g.35gb and 2g.35gb, 71,424 for 3g.71gb and 4g.71gb and 143,360 for
    7g.141gb: less than the sizes in the names. A 17 GiB isolated request does not fit 1g.18gb's
    16 GiB; it takes the next profile up."""
    h200 = load_partitions().scheme_for("H200-SXM5-141GB")
    assert h200 is not None
    sizes = {p.name: p.memory_mib for p in h200.profiles}
    assert sizes == {
        "1g.18gb": 16384,
        "1g.18gb+me": 16384,
        "1g.35gb": 33280,
        "2g.35gb": 33280,
        "3g.71gb": 71424,
        "4g.71gb": 71424,
        "7g.141gb": 143360,
    }
    found = h200.smallest_holding(17 * 1024)
    assert found is not None and found.name == "1g.35gb"
    found = h200.smallest_holding(16 * 1024)
    assert found is not None and found.name == "1g.18gb"
    assert h200.smallest_holding(141 * 1024) is None
