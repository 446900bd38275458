"""Accelerator catalog: packaged data sanity, name resolution, selection tokens, malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import (
    LINKS,
    AcceleratorCatalog,
    CatalogFileError,
    load_accelerators,
    normalise_model_name,
)
from xpupool.model.errors import CatalogError
from xpupool.model.vendor import VENDOR_KEYS


@pytest.fixture(scope="module")
def catalog() -> AcceleratorCatalog:
    return load_accelerators()


# ---------------------------------------------------------------- packaged data


def test_packaged_catalog_is_loaded_once(catalog: AcceleratorCatalog) -> None:
    assert load_accelerators() is catalog
    assert len(catalog.models) >= 40


def test_every_vendor_has_a_model(catalog: AcceleratorCatalog) -> None:
    assert {m.vendor for m in catalog.models} == set(VENDOR_KEYS)


def test_every_entry_is_sourced_and_well_formed(catalog: AcceleratorCatalog) -> None:
    for model in catalog.models:
        assert model.source.startswith("https://"), model.name
        assert model.link in LINKS, model.name
        assert model.memory_gib > 0, model.name
        # An unpublished figure is null and must be explained.
        if None in (model.fp16_tflops, model.tdp_watts):
            assert model.notes, model.name


def test_names_are_unique(catalog: AcceleratorCatalog) -> None:
    names = [normalise_model_name(m.name) for m in catalog.models]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "name",
    [
        "V100-SXM2-16GB",
        "V100-SXM2-32GB",
        "V100-PCIE-16GB",
        "V100-PCIE-32GB",
        "T4",
        "A10",
        "A10G",
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "A100-PCIE-40GB",
        "A100-PCIE-80GB",
        "L40S",
        "L20",
        "H20",
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H200-SXM5-141GB",
        "B200",
        "P100-PCIE-16GB",
        "MI210",
        "MI250X",
        "MI300X",
        "910B1",
        "910B2",
        "910B3",
        "910B4",
        "910C",
        "310P3",
        "MLU370-X4",
        "MLU370-X8",
        "MLU590",
        "K100-AI",
        "Z100L",
        "MTT-S4000",
        "MTT-S3000",
        "MTT-S80",
        "BI-V150",
        "C500",
        "S60",
        "P800",
        "Max-1550",
        "Gaudi2",
    ],
)
def test_required_models_present(catalog: AcceleratorCatalog, name: str) -> None:
    model = catalog.lookup(name)
    assert model is not None
    assert model.name == name


def test_figures_of_well_known_parts(catalog: AcceleratorCatalog) -> None:
    a100 = catalog.lookup("A100-SXM4-80GB")
    assert a100 is not None
    assert (a100.memory_gib, a100.fp16_tflops, a100.tdp_watts, a100.link) == (
        80,
        312,
        400,
        "nvlink",
    )
    t4 = catalog.lookup("T4")
    assert t4 is not None
    assert t4.bf16_tflops is None  # Turing has no BF16
    h100 = catalog.lookup("H100-SXM5-80GB")
    assert h100 is not None
    assert h100.fp16_tflops == pytest.approx(989.4)  # dense, not the 1,979 sparse headline


# ---------------------------------------------------------------- normalisation and lookup


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100sxm480gb"),
        ("Tesla V100-SXM2-16GB", "v100sxm216gb"),
        ("  k100_ai ", "k100ai"),
        ("K100-AI", "k100ai"),
        ("AMD Instinct MI300X", "mi300x"),
        ("Ascend910B3", "910b3"),
        ("Huawei Ascend 910B3", "910b3"),
        ("Intel(R) Data Center GPU Max 1550", "datacentergpumax1550"),
        ("a100:80gb", "a10080gb"),
        ("", ""),
    ],
)
def test_normalise_model_name(text: str, expected: str) -> None:
    assert normalise_model_name(text) == expected


@pytest.mark.parametrize(
    ("printed", "name"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("nvidia a100-sxm4-80gb", "A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("Tesla V100-PCIE-32GB", "V100-PCIE-32GB"),
        ("Tesla T4", "T4"),
        ("Tesla P100-PCIE-16GB", "P100-PCIE-16GB"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIE-80GB"),
        ("NVIDIA H200", "H200-SXM5-141GB"),
        ("NVIDIA B200", "B200"),
        ("910B3", "910B3"),
        ("Ascend910B3", "910B3"),
        ("Ascend910B4-1", "910B4-1"),
        ("Ascend910_9392", "910C"),
        ("310P3", "310P3"),
        ("MLU370-X8", "MLU370-X8"),
        ("K100_AI", "K100-AI"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X/MI250", "MI250X"),
        ("MTT S4000", "MTT-S4000"),
        ("MTT S3000", "MTT-S3000"),
        ("Intel(R) Data Center GPU Max 1550", "Max-1550"),
        ("HL-225", "Gaudi2"),
    ],
)
def test_lookup_resolves_printed_names(
    catalog: AcceleratorCatalog, printed: str, name: str
) -> None:
    model = catalog.lookup(printed)
    assert model is not None
    assert model.name == name


@pytest.mark.parametrize("printed", ["A100", "910B", "G2", "V100M16", "", "NVIDIA"])
def test_lookup_of_family_or_unknown_is_none(catalog: AcceleratorCatalog, printed: str) -> None:
    assert catalog.lookup(printed) is None


def test_lookup_respects_vendor(catalog: AcceleratorCatalog) -> None:
    assert catalog.lookup("910B3", vendor="huawei") is not None
    assert catalog.lookup("910B3", vendor="nvidia") is None


def test_canonical_name_wins_over_alias() -> None:
    from xpupool.catalog import AcceleratorModel

    def model(name: str, aliases: tuple[str, ...]) -> AcceleratorModel:
        return AcceleratorModel(
            "nvidia", name, "X", 1, None, None, None, "pcie", aliases, "https://x"
        )

    first, second = model("Alpha", ("Beta",)), model("Beta", ())
    assert AcceleratorCatalog((first, second)).lookup("beta") is second


def test_by_family(catalog: AcceleratorCatalog) -> None:
    names = [m.name for m in catalog.by_family("910b")]
    assert names == ["910B1", "910B2", "910B3", "910B4", "910B4-1"]
    assert catalog.by_family("no-such-family") == ()


# ---------------------------------------------------------------- selection tokens


@pytest.mark.parametrize(
    ("token", "printed"),
    [
        ("A100", "NVIDIA A100-SXM4-80GB"),
        ("a100", "NVIDIA A100 80GB PCIe"),
        ("A100-80GB", "NVIDIA A100-SXM4-80GB"),
        ("a100:80gb", "NVIDIA A100 80GB PCIe"),
        ("A100-40GB", "NVIDIA A100-PCIE-40GB"),
        ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("910B", "910B1"),
        ("910B", "910B2"),
        ("910B", "910B3"),
        ("910B", "910B4"),
        ("910B", "Ascend910B3"),
        ("Ascend910B3", "910B3"),
        ("910b3", "910B3"),
        ("T4", "Tesla T4"),
        ("t4", "Tesla T4"),
        ("V100", "Tesla V100-SXM2-32GB"),
        ("v100-32gb", "Tesla V100-PCIE-32GB"),
        ("MI200", "AMD Instinct MI250X"),
        ("MLU370", "MLU370-X8"),
        ("K100", "K100_AI"),
        ("G2", "G2"),
        ("v100m16", "V100M16"),
    ],
)
def test_matches_positive(catalog: AcceleratorCatalog, token: str, printed: str) -> None:
    assert catalog.matches(token, printed)


@pytest.mark.parametrize(
    ("token", "printed"),
    [
        ("T4", "NVIDIA A10"),
        ("T4", "NVIDIA A10G"),
        ("A10", "NVIDIA A10G"),
        ("A10", "NVIDIA A100-SXM4-80GB"),
        ("A10G", "NVIDIA A10"),
        ("A100-80GB", "NVIDIA A100-SXM4-40GB"),
        ("A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
        ("910B3", "910B4"),
        ("910B", "310P3"),
        ("910", "910B3"),
        ("V100", "V100M16"),
        ("", "Tesla T4"),
        ("H100", "NVIDIA H200"),
    ],
)
def test_matches_negative(catalog: AcceleratorCatalog, token: str, printed: str) -> None:
    assert not catalog.matches(token, printed)


def test_match_keys_for_unknown_name_is_its_normal_form(catalog: AcceleratorCatalog) -> None:
    assert catalog.match_keys("V100M16") == frozenset({"v100m16"})
    assert catalog.match_keys("G2", vendor="nvidia") == frozenset({"g2"})


def test_match_keys_respect_vendor(catalog: AcceleratorCatalog) -> None:
    assert "910b" in catalog.match_keys("910B3", vendor="huawei")
    assert catalog.match_keys("910B3", vendor="nvidia") == frozenset({"910b3"})


# ---------------------------------------------------------------- malformed files

_GOOD = """
models:
  - vendor: nvidia
    name: Good-1
    family: Good
    memory_gib: 16
    fp16_tflops: 10
    bf16_tflops: null
    tdp_watts: 70
    link: pcie
    aliases: ["Vendor Good 1"]
    source: https://example.com/good
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "accelerators.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _second(**fields: object) -> str:
    entry = {
        "vendor": "nvidia",
        "name": "bad",
        "family": "Bad",
        "memory_gib": 8,
        "fp16_tflops": None,
        "bf16_tflops": None,
        "tdp_watts": None,
        "link": "pcie",
        "source": "https://example.com/bad",
    }
    entry.update(fields)
    lines = [f"{k}: {'null' if v is None else v}" for k, v in entry.items() if v != "<drop>"]
    return _GOOD + "  - " + "\n    ".join(lines) + "\n"


def test_custom_file_loads_uncached(tmp_path: Path) -> None:
    path = _write(tmp_path, _GOOD)
    catalog = load_accelerators(path)
    assert [m.name for m in catalog.models] == ["Good-1"]
    assert catalog.lookup("Vendor Good 1") is catalog.models[0]
    assert load_accelerators(str(path)) is not catalog


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"memory_gib": "<drop>"}, "memory_gib"),
        ({"memory_gib": "lots"}, "memory_gib"),
        ({"memory_gib": 0}, "memory_gib"),
        ({"fp16_tflops": "<drop>"}, "fp16_tflops"),
        ({"tdp_watts": 70.5}, "tdp_watts"),
        ({"vendor": "acme"}, "vendor"),
        ({"link": "carrier-pigeon"}, "link"),
        ({"source": "see datasheet"}, "source"),
        ({"source": "<drop>"}, "source"),
        ({"colour": "green"}, "colour"),
        ({"aliases": '["Vendor Good 1"]'}, "aliases"),
        ({"aliases": "just-text"}, "aliases"),
    ],
)
def test_malformed_entry_names_file_entry_and_field(
    tmp_path: Path, fields: dict[str, object], field: str
) -> None:
    path = _write(tmp_path, _second(**fields))
    with pytest.raises(CatalogFileError) as info:
        load_accelerators(path)
    assert isinstance(info.value, CatalogError)
    assert info.value.path == str(path)
    assert info.value.entry == "models[1] (bad)"
    assert info.value.field == field


def test_duplicate_name_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, _second(name="good_1"))
    with pytest.raises(CatalogFileError) as info:
        load_accelerators(path)
    assert (info.value.entry, info.value.field) == ("models[1] (good_1)", "name")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("models: [\n", ""),
        ("models: []\n", "models"),
        ("devices: []\n", "devices"),
        ("- just a list\n", ""),
    ],
)
def test_malformed_file_names_the_file(tmp_path: Path, text: str, field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CatalogFileError) as info:
        load_accelerators(path)
    assert info.value.path == str(path)
    assert (info.value.entry, info.value.field) == ("", field)


def test_missing_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogFileError) as info:
        load_accelerators(tmp_path / "nope.yaml")
    assert info.value.path.endswith("nope.yaml")


@pytest.mark.parametrize(
    ("token", "known"),
    [
        ("A100", True),  # a family
        ("a100-80gb", True),  # family and size
        ("NVIDIA A100-SXM4-80GB", True),  # as a tool prints it
        ("910B", True),
        ("A1OO", False),  # letter O for zero
        ("G2", False),  # a trace's code: known only where a node of the pool has it
        ("", False),
    ],
)
def test_knows_any_name_that_selects_a_catalog_model(
    catalog: AcceleratorCatalog, token: str, known: bool
) -> None:
    assert catalog.knows(token) is known
