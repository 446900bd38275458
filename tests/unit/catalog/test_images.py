"""Image rules: each family's tags read into needs and product lines, what an unknown or
unversioned image says, and a bad rule file named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import CatalogFileError
from xpupool.catalog.images import (
    ImageCatalog,
    default_image_catalog,
    load_image_rules,
    needs_for_image,
)
from xpupool.catalog.operator_file import load_operator_catalog

HUB = "swr.cn-south-1.myhuaweicloud.com/ascendhub"


def needs(image: str) -> tuple[list[str], tuple[str, ...], str | None]:
    """(needs as text, product models or vendors, rule name) for ``image``."""
    found = needs_for_image(image)
    product = ()
    if found.product is not None:
        product = found.product.models or found.product.vendors
    rule = found.rule.split(": ")[1] if found.rule else None
    return [str(n) for n in found.software], product, rule


@pytest.mark.parametrize(
    ("image", "expected", "product", "rule"),
    [
        # pytorch/pytorch: the tag spells torch and CUDA
        (
            "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
            ["cuda>=12.4", "torch==2.4.0"],
            (),
            "pytorch",
        ),
        (
            "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-devel",
            ["cuda>=11.8", "torch==2.1.2"],
            (),
            "pytorch",
        ),
        # NVIDIA CUDA base images
        ("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", ["cuda>=12.4.1"], (), "nvidia-cuda"),
        ("nvcr.io/nvidia/cuda:12.8.1-devel-ubuntu24.04", ["cuda>=12.8.1"], (), "nvidia-cuda"),
        # NGC YY.MM -> CUDA per the support matrix
        ("nvcr.io/nvidia/pytorch:24.05-py3", ["cuda>=12.4.1"], (), "ngc-pytorch"),
        ("nvcr.io/nvidia/pytorch:23.07-py3", ["cuda>=12.1.1"], (), "ngc-pytorch"),
        ("nvcr.io/nvidia/pytorch:25.01-py3-igpu", ["cuda>=12.8"], (), "ngc-pytorch"),
        # vLLM: a table per release
        ("vllm/vllm-openai:v0.6.3", ["cuda>=12.4.1", "torch==2.4.0"], (), "vllm-openai"),
        ("vllm/vllm-openai:v0.6.3.post1", ["cuda>=12.4.1", "torch==2.4.0"], (), "vllm-openai"),
        ("vllm/vllm-openai:v0.8.5", ["cuda>=12.4.1", "torch==2.6.0"], (), "vllm-openai"),
        ("vllm/vllm-openai:v0.9.1", ["cuda>=12.8.1", "torch==2.7.0"], (), "vllm-openai"),
        # ROCm: the release in the tag, +/-2 window through rocm==
        (
            "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
            ["rocm==6.2"],
            (),
            "rocm-pytorch",
        ),
        (
            "rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.4",
            ["rocm==6.1"],
            (),
            "rocm-pytorch",
        ),
        (
            "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4",
            ["rocm==6.2"],
            ("MI300",),
            "rocm-vllm",
        ),
        ("rocm/vllm:rocm6.3.1_instinct_vllm0.7.3_20250311", ["rocm==6.3.1"], (), "rocm-vllm"),
        # Ascend: CANN and the Atlas product line
        (f"{HUB}/mindie:1.0.RC2-800I-A2-aarch64", ["cann>=8.0.RC2"], ("910B",), "ascend-mindie"),
        (
            f"{HUB}/mindie:1.0.0-300I-Duo-py311-openeuler24.03-lts",
            ["cann>=8.0.0"],
            ("310P",),
            "ascend-mindie",
        ),
        (f"{HUB}/mindie:1.0.RC3-800I-A3", ["cann>=8.0.RC3"], ("910C",), "ascend-mindie"),
        (
            f"{HUB}/ascend-pytorch:24.0.RC1-A2-2.1.0-ubuntu20.04",
            ["torch==2.1.0"],
            ("910B",),
            "ascend-pytorch",
        ),
        (
            f"{HUB}/cann:8.0.RC2-910b-ubuntu22.04-py3.10",
            ["cann>=8.0.RC2"],
            ("910B",),
            "ascend-cann",
        ),
        (
            "quay.io/ascend/cann:8.1.rc1-a3-openeuler22.03-py3.10",
            ["cann>=8.1.rc1"],
            ("910C",),
            "ascend-cann",
        ),
        (
            "quay.io/ascend/vllm-ascend:v0.9.1",
            ["cann>=8.2.RC1", "torch==2.5.1"],
            (),
            "vllm-ascend",
        ),
        (
            "quay.io/ascend/vllm-ascend:v0.7.3.post1",
            ["cann>=8.1.RC1", "torch==2.5.1"],
            (),
            "vllm-ascend",
        ),
        (
            f"{HUB}/mindie:2.1.RC1-800I-A2-py311-openeuler24.03-lts",
            ["cann>=8.2.RC1"],
            ("910B",),
            "ascend-mindie",
        ),
        (
            "quay.io/ascend/vllm-ascend:v0.9.1-310p",
            ["cann>=8.2.RC1", "torch==2.5.1"],
            ("310P",),
            "vllm-ascend",
        ),
        # Hygon DTK: the vendor, no version need (no DTK -> ROCm table exists)
        (
            "image.sourcefind.cn:5000/dcu/admin/base/pytorch:2.1.0-ubuntu20.04-dtk24.04-py310",
            [],
            ("hygon",),
            "hygon-dtk",
        ),
    ],
)
def test_each_family_reads_its_tags(
    image: str, expected: list[str], product: tuple[str, ...], rule: str
) -> None:
    assert needs(image) == (expected, product, rule)


def test_every_rule_has_a_source_and_the_packaged_file_loads_once() -> None:
    catalog = default_image_catalog()
    assert catalog is default_image_catalog()
    assert all(rule.source.startswith("https://") for rule in catalog.rules)
    assert {r.name for r in catalog.rules} >= {
        "pytorch",
        "ngc-pytorch",
        "vllm-openai",
        "rocm-pytorch",
        "rocm-vllm",
        "ascend-mindie",
        "ascend-pytorch",
        "ascend-cann",
        "hygon-dtk",
    }


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("busybox", "no catalog rule knows image busybox: no software needs added"),
        (
            "registry.example/train:1",
            "no catalog rule knows image registry.example/train:1: no software needs added",
        ),
        ("pytorch/pytorch", "names no tag"),
        ("pytorch/pytorch:latest", "is tagged 'latest'"),
        ("pytorch/pytorch@sha256:" + "a" * 64, "names no tag"),
        ("pytorch/pytorch:nightly", "catalog rule pytorch knows docker.io/pytorch/pytorch but"),
        ("vllm/vllm-openai:v0.1.0", "version '0.1.0' is not in catalog rule vllm-openai's table"),
        ("Not An Image", "is not an image reference"),
    ],
)
def test_what_adds_nothing_says_why(image: str, said: str) -> None:
    found = needs_for_image(image)
    assert found.software == () and found.product is None
    assert any(said in note for note in found.notes), found.notes


def test_hostile_references_are_answers_not_crashes() -> None:
    for image in ("", "x" * 100_000, "a:" + "9" * 5000, "\x00", "a/" * 300 + "b", "ü:1"):
        assert needs_for_image(image).software == ()


# ------------------------------------------------------------------ rule files
GOOD = """\
images:
  - name: site-train
    repository: registry.example/team/*
    tag: 'cu(?P<cuda>\\d+\\.\\d+)-(?P<build>\\d+)'
    needs: ["cuda>={cuda}"]
    source: https://wiki.example/images
    tables:
      - group: build
        rows:
          - {match: "7", needs: ["torch==2.4"], product: {name: A100 pool, models: [A100]}}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    return path


def test_operator_rules_are_tried_first(tmp_path: Path) -> None:
    own = load_image_rules(_write(tmp_path, GOOD))
    catalog = default_image_catalog().with_rules_first(own)
    found = catalog.needs_for("registry.example/team/llm:cu12.4-7")
    assert [str(n) for n in found.software] == ["cuda>=12.4", "torch==2.4"]
    assert found.product is not None and found.product.models == ("A100",)
    assert found.rule == f"{tmp_path / 'catalog.yaml'}: site-train"
    shadow = GOOD.replace("registry.example/team/*", "pytorch/pytorch").replace(
        "'cu(?P<cuda>\\d+\\.\\d+)-(?P<build>\\d+)'", "'(?P<build>\\d+)\\.(?P<cuda>\\d+\\.\\d+)'"
    )
    (tmp_path / "b").mkdir()
    first = ImageCatalog(()).with_rules_first(load_image_rules(_write(tmp_path / "b", shadow)))
    both = default_image_catalog().with_rules_first(first.rules)
    assert both.needs_for("pytorch/pytorch:7.12.1").rule is not None
    assert "site-train" in str(both.needs_for("pytorch/pytorch:7.12.1").rule)
    # a tag the operator's rule does not read falls through to the built-in rule
    builtin = both.needs_for("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime")
    assert builtin.rule == "images.yaml: pytorch"


@pytest.mark.parametrize(
    ("old", "new", "line", "field"),
    [
        ("    source: https://wiki", "    sauce: https://wiki", 6, "sauce"),  # unknown field
        ("'cu(?P<cuda>", "'cu(?P<cuda", 4, "tag"),  # bad regex
        ('["cuda>={cuda}"]', '["cuda>={cudaa}"]', 5, "needs"),  # template names no group
        ('["cuda>={cuda}"]', '["cuda>>{cuda}"]', 5, "needs"),  # not a need
        ('["torch==2.4"]', '["torch==two"]', 10, "needs"),  # bad version in a table row
        ('["torch==2.4"]', '["opencl>=3"]', 10, "needs"),  # unknown software
        ("models: [A100]", "models: [A1000]", 10, "models"),  # unknown accelerator
        ("name: A100 pool, models", "name: A100 pool, vendors: [nvida], models", 10, "vendors"),
        ("      - group: build", "      - group: bulid", 8, "group"),
        ('{match: "7",', "{match: 7,", 10, "match"),  # unquoted: YAML makes it a number
        ("    source: https://wiki.example/images", "    source: wiki.example", 6, "source"),
        (
            "    repository: registry",
            "    repository_regex: '['\n    repository: registry",
            4,
            "repository",
        ),
    ],
)
def test_a_bad_rule_names_file_line_and_field(
    tmp_path: Path, old: str, new: str, line: int, field: str
) -> None:
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(CatalogFileError) as info:
        load_operator_catalog(path)
    error = info.value
    assert (error.path, error.line, error.field) == (str(path), line, field), str(error)
    assert str(error).startswith(f"{path}:{line}: ")


def test_operator_file_sections(tmp_path: Path) -> None:
    catalog = load_operator_catalog(_write(tmp_path, GOOD))
    assert [r.name for r in catalog.images] == ["site-train"]
    for text, field, reason in [
        ("image:\n  - {}\n", "image", "unknown section"),
        ("models:\n  - {name: x}\n", "models", "not supported yet"),
        ("images: []\n", "images", "non-empty list"),
        ("- images\n", "", "mapping of sections"),
        ("", "", "empty file"),
        ("images: [\n", "", "not valid YAML"),
    ]:
        with pytest.raises(CatalogFileError) as info:
            load_operator_catalog(_write(tmp_path, text))
        assert info.value.field == field and reason in info.value.reason, str(info.value)


def test_duplicate_rule_names_and_keys_are_refused(tmp_path: Path) -> None:
    rule = GOOD.split("images:\n")[1]
    with pytest.raises(CatalogFileError) as info:
        load_operator_catalog(_write(tmp_path, GOOD + rule))
    assert (info.value.field, info.value.line) == ("name", 11)
    twice = GOOD.replace("    tag:", "    tag: 'x'\n    tag:", 1)
    with pytest.raises(CatalogFileError) as info:
        load_operator_catalog(_write(tmp_path, twice))
    assert info.value.line == 5 and "given twice" in info.value.reason
