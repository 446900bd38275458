"""Model catalog: the packaged data covers the issue's models, and malformed files fail naming
the entry and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.catalog import CatalogFileError, load_accelerators
from xpupool.catalog.models import PLACEHOLDERS, load_models
from xpupool.model.errors import RequestError

WANTED = [
    *(f"qwen2.5-{s}" for s in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")),
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "llama3.1-8b",
    "llama3.3-70b",
    "deepseek-v3",
    "deepseek-r1",
    *(f"deepseek-r1-distill-qwen-{s}" for s in ("1.5b", "7b", "14b", "32b")),
    "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-llama-70b",
    "resnet-50",
    "bert-base",
    "bert-large",
    *(f"yolov8{s}" for s in "nsmlx"),
]


def test_packaged_catalog_has_the_issue_models() -> None:
    catalog = load_models()
    assert load_models() is catalog
    for name in WANTED:
        model = catalog.get(name)
        assert model.source.startswith("https://")
    assert catalog.get("Qwen2.5-7B").name == "qwen2.5-7b"  # case-insensitive


def test_moe_and_mla_figures() -> None:
    catalog = load_models()
    v3 = catalog.get("deepseek-v3")
    assert v3.is_moe and v3.active_params_b == 37 and v3.mla is not None
    assert v3.mla.kv_lora_rank == 512 and v3.mla.qk_rope_head_dim == 64
    assert v3.native_precision == "fp8"
    assert catalog.get("qwen3-235b-a22b").experts_total == 128
    assert not catalog.get("qwen2.5-72b").is_moe


def test_runtimes_per_vendor_fill_the_template() -> None:
    catalog = load_models()
    model = catalog.get("qwen2.5-7b")
    cuda = catalog.runtime_for(model, "nvidia", "bf16")
    ascend = catalog.runtime_for(model, "huawei", "bf16")
    assert cuda is not None and ascend is not None and cuda.name != ascend.name
    assert "cuda>=12.4" in cuda.software and ascend.software[0].startswith("cann>=")
    argv = ascend.argv(model="/models/q7", tp=2, pp=1, port=9000, max_model_len=4096)
    assert argv[:3] == ["vllm", "serve", "/models/q7"]
    assert "--tensor-parallel-size" in argv and argv[argv.index("--port") + 1] == "9000"
    assert catalog.runtime_for(model, "cambricon", "bf16") is None
    assert catalog.runtime_for(model, "huawei", "int4") is None  # vllm-ascend: no int4 path


def test_every_serving_runtime_names_its_cache() -> None:
    """The model cache (``xpupool up --model-cache``) is mounted where each runtime looks for
    downloaded weights; a runtime without one would download again in every replica."""
    for runtime in load_models().runtimes:
        assert runtime.cache_path.startswith("/") and runtime.cache_env, runtime.name
    cuda = load_models().runtime("vllm-cuda")
    assert (cuda.cache_path, cuda.cache_env) == ("/root/.cache/huggingface", "HF_HOME")


def test_every_accelerator_has_a_bandwidth_field_and_source() -> None:
    for card in load_accelerators().models:
        assert card.memory_bandwidth_source.startswith("https://"), card.name
        if card.memory_bandwidth_gbps is None:
            assert "not published" in card.memory_bandwidth_notes, card.name
    a100 = load_accelerators().lookup("A100-SXM4-80GB")
    assert a100 is not None and a100.memory_bandwidth_gbps == 2039


def test_unknown_model_names_the_field() -> None:
    with pytest.raises(RequestError) as bad:
        load_models().get("qwen9-1t", "model.name")
    assert bad.value.field == "model.name" and "qwen2.5-7b" in bad.value.reason


RUNTIME = """
runtimes:
  - name: r
    vendors: [nvidia]
    engine: vllm
    image: img:1
    command: [serve, "{model}", "{tp}"]
    port: 8000
    software: ["cuda>=12.4"]
    precisions: [bf16]
    source: https://example.org
"""
MODEL = """
models:
  - name: m
    hub_id: org/m
    kind: decoder
    params_b: 1
    layers: 2
    hidden_size: 64
    attention_heads: 4
    kv_heads: 2
    head_dim: 16
    max_context: 128
    native_precision: bf16
    precisions: [bf16]
    runtimes: [r]
    source: https://example.org
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return load_models(path)


def test_minimal_file_loads(tmp_path: Path) -> None:
    assert _load(tmp_path, RUNTIME + MODEL).get("m").runtimes == ("r",)


@pytest.mark.parametrize(
    ("old", "new", "entry", "field"),
    [
        ('"{tp}"]', '"{tpp}"]', "runtimes[0] (r)", "command"),
        ("cuda>=12.4", "cuda>>12", "runtimes[0] (r)", "software"),
        ("port: 8000", "port: 70000", "runtimes[0] (r)", "port"),
        ("kv_heads: 2", "kv_heads: 3", "models[0] (m)", "kv_heads"),
        ("runtimes: [r]", "runtimes: [nope]", "models[0] (m)", "runtimes"),
        ("kind: decoder", "kind: llm", "models[0] (m)", "kind"),
        (
            "precisions: [bf16]\n    runtimes",
            "precisions: [bf9]\n    runtimes",
            "models[0] (m)",
            "precisions",
        ),
        ("head_dim: 16", "head_dims: 16", "models[0] (m)", "head_dims"),
        ("native_precision: bf16", "native_precision: fp8", "models[0] (m)", "native_precision"),
        ("params_b: 1", "params_b: -1", "models[0] (m)", "params_b"),
        ("port: 8000", "port: 8000\n    cache_path: /c", "runtimes[0] (r)", "cache_env"),
        ("port: 8000", "port: 8000\n    cache_env: HF_HOME", "runtimes[0] (r)", "cache_path"),
        (
            "port: 8000",
            "port: 8000\n    cache_path: c\n    cache_env: HF_HOME",
            "runtimes[0] (r)",
            "cache_path",
        ),
        (
            "port: 8000",
            "port: 8000\n    cache_path: /c\n    cache_env: HF-HOME",
            "runtimes[0] (r)",
            "cache_env",
        ),
    ],
)
def test_malformed_file_names_entry_and_field(
    tmp_path: Path, old: str, new: str, entry: str, field: str
) -> None:
    text = RUNTIME + MODEL
    assert old in text
    with pytest.raises(CatalogFileError) as bad:
        _load(tmp_path, text.replace(old, new, 1))
    assert (bad.value.entry, bad.value.field) == (entry, field)


def test_placeholders_are_the_documented_ones() -> None:
    assert {"model", "tp", "pp", "port", "max_model_len"} == PLACEHOLDERS
