"""Compatibility tables: CUDA/ROCm/CANN driver verdicts, torch builds, edge cases, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import (
    CatalogFileError,
    CompatTable,
    Verdict,
    best_verdict,
    load_compat,
    satisfies,
)
from xpupool.model.request import parse_software_need
from xpupool.model.version import parse_version

OK = Verdict.OK
OLD = Verdict.DRIVER_TOO_OLD
NEW = Verdict.DRIVER_TOO_NEW
UNKNOWN = Verdict.DRIVER_UNKNOWN
UNSUPPORTED = Verdict.UNSUPPORTED


@pytest.fixture(scope="module")
def table() -> CompatTable:
    return load_compat()


def check(
    table: CompatTable,
    need: str,
    vendor: str,
    driver: str | None,
    runtimes: dict[str, str] | None = None,
) -> Verdict:
    return table.check(parse_software_need(need), vendor, driver, runtimes or {})


def test_verdict_codes_are_stable() -> None:
    assert [int(v) for v in (OK, UNSUPPORTED, OLD, NEW, UNKNOWN)] == [0, 1, 2, 3, 4]


def test_packaged_tables_are_loaded_once(table: CompatTable) -> None:
    assert load_compat() is table
    assert set(table.runtimes) == {"cuda", "rocm", "cann"}


# ---------------------------------------------------------------- CUDA


@pytest.mark.parametrize(
    ("runtime", "version", "driver"),
    [
        ("cuda", "11.0", "450.51.05"),
        ("cuda", "11.8", "520.61.05"),
        ("cuda", "12.1", "530.30.02"),
        ("cuda", "12.4", "550.54.14"),
        ("cuda", "12.4.1", "550.54.15"),
        ("cuda", "13.0", "580.65.06"),
        ("cuda", "12.7", "560.35.05"),  # between releases: the release below stands in
        ("rocm", "6.0", "5.6"),
        ("cann", "8.0.RC1", "24.1.rc1"),
    ],
)
def test_min_driver(table: CompatTable, runtime: str, version: str, driver: str) -> None:
    assert table.min_driver(runtime, parse_version(version)) == parse_version(driver)


def test_min_driver_unknown(table: CompatTable) -> None:
    assert table.min_driver("cuda", parse_version("10.2")) is None
    assert table.min_driver("opencl", parse_version("3.0")) is None


@pytest.mark.parametrize(
    ("need", "driver", "verdict"),
    [
        ("cuda>=12.4", "550.54.15", OK),
        ("cuda>=12.4", "550.54.14", OK),
        ("cuda>=12.4", "535.104.05", OLD),
        ("cuda>=12.1", "535.104.05", OK),
        ("cuda==12.4", "550.54.14", OK),  # == matches on the given components: 12.4 GA
        ("cuda==12.4.1", "550.54.14", OLD),
        ("cuda~=12.2", "535.54.03", OK),
        ("cuda>12.4", "550.54.15", OK),  # 12.4.1 is > 12.4
        ("cuda<=11.8", "450.51.05", OK),  # any older version will do
        ("cuda<12.0", "440.33", OLD),
        ("cuda!=12.4", "450.51.05", OK),
        ("cuda>=14.0", "600.10", OK),  # newer than the table: newest known row stands in
        ("cuda>=14.0", "590.48.01", OLD),
        ("cuda==10.2", "470.82.01", OK),  # older than the table, driver serves the oldest row
        ("cuda==10.2", "440.33", UNKNOWN),  # the table cannot say
        ("cuda>=12.4", "N/A", UNKNOWN),
    ],
)
def test_cuda_by_driver(table: CompatTable, need: str, driver: str, verdict: Verdict) -> None:
    assert check(table, need, "nvidia", driver) == verdict


def test_cuda_without_driver_is_unknown(table: CompatTable) -> None:
    assert check(table, "cuda>=12.4", "nvidia", None) == UNKNOWN


@pytest.mark.parametrize("vendor", ["huawei", "amd", "cambricon", "hygon", "intel"])
def test_cuda_elsewhere_is_unsupported(table: CompatTable, vendor: str) -> None:
    assert check(table, "cuda>=11.0", vendor, "24.1.rc2") == UNSUPPORTED
    assert check(table, "cuda>=11.0", vendor, "24.1.rc2", {"cuda": "12.4"}) == UNSUPPORTED


@pytest.mark.parametrize(
    ("need", "reported", "verdict"),
    [
        ("cuda>=12.4", "12.4", OK),
        ("cuda>=12.4", "12.6", OK),
        ("cuda>=12.6", "12.4", OLD),
        ("cuda==12.1", "12.4", OK),  # a 12.4 driver serves 12.1
        # The report is the driver API's major.minor (cuDriverGetVersion 12040, nvidia-smi's
        # "CUDA Version: 12.4"): it serves every 12.4.x toolkit, updates included.
        ("cuda==12.4.1", "12.4", OK),
        ("cuda>=12.4.1", "12.4", OK),
        ("cuda>12.4", "12.4", OK),
        ("cuda>=12.5", "12.4", OLD),
        ("cuda>=12.4.1", "12.4.0", OLD),  # a report with a patch level is read as it says
        ("cuda<=11.0", "12.4", OK),
    ],
)
def test_reported_cuda_wins_over_driver(
    table: CompatTable, need: str, reported: str, verdict: Verdict
) -> None:
    # The driver alone would say the opposite for most rows: the report is what counts.
    assert check(table, need, "nvidia", "470.82.01", {"cuda": reported}) == verdict
    assert check(table, need, "nvidia", None, {"cuda": reported}) == verdict


def test_unparsable_reported_runtime_falls_back_to_driver(table: CompatTable) -> None:
    assert check(table, "cuda>=12.4", "nvidia", "550.54.15", {"cuda": "N/A"}) == OK


def test_cuda_compatible_vendors_count_only_when_reported(table: CompatTable) -> None:
    assert check(table, "cuda>=10.2", "iluvatar", "3.1.0") == UNSUPPORTED
    assert check(table, "cuda>=10.2", "iluvatar", "3.1.0", {"cuda": "10.2"}) == OK


# ---------------------------------------------------------------- CANN


@pytest.mark.parametrize(
    ("need", "driver", "verdict"),
    [
        ("cann>=8.0.RC1", "24.1.rc1", OK),
        ("cann>=8.0.RC1", "24.1.0", OK),
        ("cann>=8.0.RC1", "23.0.3", OLD),
        ("cann==8.0.RC3", "24.1.rc1", OLD),
        ("cann==8.0.RC3", "24.1.rc2", OK),
        ("cann>=7.0", "23.0.3", OK),
        ("cann==7.0.0", "23.0.rc3", OLD),
        ("cann>=8.2.RC1", "25.0.rc1", OK),
    ],
)
def test_cann_by_driver(table: CompatTable, need: str, driver: str, verdict: Verdict) -> None:
    assert check(table, need, "huawei", driver) == verdict


def test_cann_on_other_vendors_is_unsupported(table: CompatTable) -> None:
    assert check(table, "cann>=8.0.RC1", "nvidia", "550.54.15") == UNSUPPORTED


@pytest.mark.parametrize(
    ("need", "installed", "verdict"),
    [
        ("cann>=8.0.RC3", "8.0.RC3", OK),
        ("cann>=8.0.RC3", "8.0.RC2", OLD),
        ("cann==8.0.RC1", "8.0.0", NEW),
        ("cann==8.0", "8.0.RC2", OK),  # == on two components means the 8.0 series
    ],
)
def test_installed_cann_is_compared_directly(
    table: CompatTable, need: str, installed: str, verdict: Verdict
) -> None:
    assert check(table, need, "huawei", "25.0.rc1", {"cann": installed}) == verdict


# ---------------------------------------------------------------- ROCm


@pytest.mark.parametrize(
    ("need", "kmd", "verdict"),
    [
        ("rocm==6.0", "6.2.4", OK),
        ("rocm==6.0", "5.6.1", OK),
        ("rocm==6.0", "6.3.1", NEW),
        ("rocm==6.0", "5.5.0", OLD),
        ("rocm>=6.0", "6.3.1", OK),  # 6.1+ runs on KMD 6.3
        ("rocm==6.1.2", "6.1.3", OK),  # patch release uses the 6.1 row
        ("rocm>=6.3", "6.0.2", OLD),
    ],
)
def test_rocm_by_kmd(table: CompatTable, need: str, kmd: str, verdict: Verdict) -> None:
    assert check(table, need, "amd", kmd) == verdict


def test_rocm_on_hygon_needs_a_reported_runtime(table: CompatTable) -> None:
    assert check(table, "rocm>=6.0", "hygon", "6.3.8") == UNSUPPORTED
    assert check(table, "rocm>=6.0", "hygon", "6.3.8", {"rocm": "6.0.2"}) == OK
    assert check(table, "rocm>=6.1", "hygon", None, {"rocm": "6.0.2"}) == OLD


def test_installed_rocm_overrides_kmd(table: CompatTable) -> None:
    assert check(table, "rocm>=6.2", "amd", "5.5.0", {"rocm": "6.2.1"}) == OK
    assert check(table, "rocm<6.0", "amd", "5.5.0", {"rocm": "6.2.1"}) == NEW


# ---------------------------------------------------------------- torch


@pytest.mark.parametrize(
    ("need", "vendor", "driver", "verdict"),
    [
        ("torch==2.4", "nvidia", "525.60.13", OK),  # the cu118 build needs only 520.61.05
        ("torch==2.4", "nvidia", "510.47.03", OLD),
        ("torch==2.4", "nvidia", None, UNKNOWN),
        ("torch>=2.3", "nvidia", "520.61.05", OK),
        ("torch==2.4", "huawei", "24.1.rc2", OK),  # torch_npu 2.4.0 on CANN 8.0.RC3
        ("torch==2.4", "huawei", "23.0.3", OLD),
        ("torch==2.4", "amd", "6.1.3", OK),
        ("torch==2.4", "amd", "6.3.1", OK),  # rocm6.1 build: KMD 6.3 within +/-2
        ("torch==2.0", "amd", "6.3.1", NEW),  # rocm5.4.2 build only
        ("torch==2.4", "cambricon", "5.10.22", UNSUPPORTED),
        ("torch==1.13", "huawei", "24.1.rc2", UNSUPPORTED),  # no torch_npu for 1.13
        ("torch>=2.5", "huawei", "24.1.rc2", OK),
        ("torch==2.6", "nvidia", "525.60.13", OK),  # not in table: 2.5.1 stands in
        ("torch==1.0", "nvidia", "550.54.15", UNKNOWN),  # older than the table
    ],
)
def test_torch(
    table: CompatTable, need: str, vendor: str, driver: str | None, verdict: Verdict
) -> None:
    assert check(table, need, vendor, driver) == verdict


def test_torch_uses_reported_runtime(table: CompatTable) -> None:
    assert check(table, "torch==2.4", "nvidia", None, {"cuda": "11.8"}) == OK
    assert check(table, "torch==2.4", "nvidia", None, {"cuda": "11.7"}) == OLD


def test_every_torch_build_resolves_to_a_driver_row(table: CompatTable) -> None:
    for _version, builds in table.torch:
        for build in builds:
            assert table.min_driver(build.runtime, build.version) is not None, build


# ---------------------------------------------------------------- helpers


def test_best_verdict_order() -> None:
    assert best_verdict([UNSUPPORTED, UNKNOWN, NEW, OLD]) == OLD
    assert best_verdict([UNSUPPORTED, UNKNOWN, NEW]) == NEW
    assert best_verdict([UNSUPPORTED, UNKNOWN]) == UNKNOWN
    assert best_verdict([UNSUPPORTED, OK]) == OK
    assert best_verdict([]) == UNSUPPORTED


@pytest.mark.parametrize(
    ("version", "op", "wanted", "expected"),
    [
        ("2.4.1", "==", "2.4", True),
        ("2.5.0", "==", "2.4", False),
        ("12.4", "==", "12.4.0", True),
        ("12.4", "==", "12.4.1", False),
        ("8.0.RC3", "==", "8.0.RC3", True),
        ("8.0.0", "==", "8.0.RC3", False),
        ("2.4.1", "!=", "2.4", False),
        ("12.6", ">=", "12.4", True),
    ],
)
def test_satisfies(version: str, op: str, wanted: str, expected: bool) -> None:
    assert satisfies(parse_version(version), op, parse_version(wanted)) is expected


# ---------------------------------------------------------------- custom and malformed files

_MINIMAL = """
cuda:
  source: https://example.com/cuda
  vendors: [nvidia]
  backward_compatible: true
  reported_runtime: max
  versions:
    - {version: "12.0", min_driver: "525.60.13"}
rocm:
  source: https://example.com/rocm
  vendors: [amd]
  backward_compatible: false
  reported_runtime: installed
  versions:
    - {version: "6.0", min_driver: "5.6", max_driver: "6.3"}
cann:
  source: https://example.com/cann
  vendors: [huawei]
  backward_compatible: false
  reported_runtime: installed
  versions:
    - {version: "8.0.RC1", min_driver: "24.1.rc1", max_driver: "25.0.rc1"}
torch:
  source: https://example.com/torch
  versions:
    - version: "2.4.0"
      builds: [{runtime: cann, version: "8.0.RC1"}]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "compat.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_custom_table_with_upper_bound(tmp_path: Path) -> None:
    custom = load_compat(_write(tmp_path, _MINIMAL))
    assert custom is not load_compat()
    assert check(custom, "cann>=8.0.RC1", "huawei", "24.1.rc2") == OK
    assert check(custom, "cann>=8.0.RC1", "huawei", "25.0.rc1") == NEW
    assert check(custom, "cann>=8.0.RC1", "huawei", "23.0.3") == OLD
    assert check(custom, "torch==2.4", "huawei", "25.0.1") == NEW
    assert check(custom, "torch==2.4", "nvidia", "550.54.15") == UNSUPPORTED


@pytest.mark.parametrize(
    ("old", "new", "entry", "field"),
    [
        (
            '{version: "12.0", min_driver',
            "{version: 12.0, min_driver",
            "cuda.versions[0]",
            "version",
        ),
        ('min_driver: "525.60.13"', 'min_driver: "525.x.y"', "cuda.versions[0]", "min_driver"),
        ('min_driver: "525.60.13"', "driver: 525", "cuda.versions[0]", "driver"),
        ('max_driver: "6.3"', 'max_driver: "5.0"', "rocm.versions[0]", "max_driver"),
        ("vendors: [amd]", "vendors: [amdd]", "rocm", "vendors"),
        ("reported_runtime: max", "reported_runtime: newest", "cuda", "reported_runtime"),
        (
            "backward_compatible: true",
            "backward_compatible: yes-ish",
            "cuda",
            "backward_compatible",
        ),
        ("source: https://example.com/torch", "source: pytorch.org", "torch", "source"),
        ("{runtime: cann,", "{runtime: opencl,", "torch.versions[0].builds[0]", "runtime"),
        ("torch:\n  source", "pytorch:\n  source", "", "pytorch"),
    ],
)
def test_malformed_table_names_entry_and_field(
    tmp_path: Path, old: str, new: str, entry: str, field: str
) -> None:
    assert old in _MINIMAL
    path = _write(tmp_path, _MINIMAL.replace(old, new, 1))
    with pytest.raises(CatalogFileError) as info:
        load_compat(path)
    assert info.value.path == str(path)
    assert (info.value.entry, info.value.field) == (entry, field)


def test_duplicate_version_is_rejected(tmp_path: Path) -> None:
    text = _MINIMAL.replace(
        '    - {version: "12.0", min_driver: "525.60.13"}',
        '    - {version: "12.0", min_driver: "525.60.13"}\n'
        '    - {version: "12.0.0", min_driver: "525.60.13"}',
    )
    with pytest.raises(CatalogFileError) as info:
        load_compat(_write(tmp_path, text))
    assert (info.value.entry, info.value.field) == ("cuda", "versions")


def test_missing_table_is_named(tmp_path: Path) -> None:
    text = _MINIMAL.split("torch:")[0]
    with pytest.raises(CatalogFileError) as info:
        load_compat(_write(tmp_path, text))
    assert (info.value.entry, info.value.field) == ("", "torch")


# ---------------------------------------------------------------- the driver a need asks for


@pytest.mark.parametrize(
    ("need", "vendor", "driver", "needed"),
    [
        ("cuda>=12.4", "nvidia", "525.85.12", "550.54.14"),
        ("cuda>=12.4", "nvidia", "550.54.13", "550.54.14"),  # one below the minimum
        ("cuda>=12.4", "nvidia", "550.54.14", None),  # exactly at it: nothing to ask
        ("cuda>=12.4", "nvidia", None, "550.54.14"),
        ("cuda>=12.4.1", "nvidia", "535.104.05", "550.54.15"),
        ("cuda==12.7", "nvidia", "550.54.15", "560.35.05"),  # between rows: the row below
        ("torch==2.4", "nvidia", "515.43.04", "520.61.05"),  # its oldest CUDA build, 11.8
        ("torch==2.4.0", "huawei", "23.0.3", "24.1.rc2"),  # its CANN builds: 8.0.RC3 and up
        ("cann>=8.0.RC2", "huawei", "23.0.3", "24.1.rc1"),
        ("rocm==6.2", "amd", "5.7", "6.0"),
        ("cuda>=12.4", "huawei", "24.1.rc2", None),  # Ascend runs no CUDA: no driver helps
    ],
)
def test_needed_driver_is_the_lowest_above_the_device(
    table: CompatTable, need: str, vendor: str, driver: str | None, needed: str | None
) -> None:
    found = table.needed_driver(parse_software_need(need), vendor, driver)
    assert (None if found is None else str(found)) == needed


def test_needed_driver_agrees_with_check_at_the_boundary(table: CompatTable) -> None:
    """One below the minimum is too old and asks for the minimum; exactly at it runs."""
    need = parse_software_need("cuda>=12.4")
    needed = table.needed_driver(need, "nvidia", "550.54.13")
    assert needed is not None
    assert check(table, "cuda>=12.4", "nvidia", "550.54.13") == OLD
    assert check(table, "cuda>=12.4", "nvidia", str(needed)) == OK
