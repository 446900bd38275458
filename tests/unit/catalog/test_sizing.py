"""Sizing formulas against published worked examples (each test cites its source).

The examples: Hugging Face's Llama 3.1 launch post (weights per precision and the KV cache of
128k tokens), NVIDIA's inference-optimization post (Llama 2 7B KV cache), the ZeRO paper (16
bytes per parameter for mixed-precision Adam), the QLoRA paper (65B on one 48 GB card) and the
DeepSeek-V2 paper (MLA's cache per token).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from xpupool.catalog.models import ModelSpec, load_models
from xpupool.catalog.sizing import (
    GIB,
    decode_tokens_per_s,
    finetune_memory,
    kv_bytes_per_token,
    per_card_bytes,
    serve_memory,
    weights_bytes,
)
from xpupool.model.errors import RequestError

GB = 1e9


def dense(name: str, params_b: float, layers: int, hidden: int, heads: int, kv: int) -> ModelSpec:
    """A model the catalog does not ship, from its published architecture."""
    return ModelSpec(
        name=name,
        aliases=(),
        hub_id=name,
        kind="decoder",
        params_b=params_b,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv,
        head_dim=hidden // heads,
        max_context=4096,
        native_precision="bf16",
        precisions=("fp32", "bf16", "fp16", "fp8", "int8", "int4"),
        runtimes=(),
        source="https://example.org",
    )


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    return load_models()


# ---- example 1: https://huggingface.co/blog/llama31 ("Inference Memory Requirements")
# Weights: 8B = 16 / 8 / 4 GB and 70B = 140 / 70 / 35 GB in FP16 / FP8 / INT4. KV cache (FP16)
# for 128k (128,000) tokens: 8B 15.62 GB and 70B 39.06 GB (the post's GB are GiB here).


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama3.1-8b", {"bf16": 16, "fp8": 8, "int4": 4}),
        ("llama3.1-70b", {"bf16": 140, "fp8": 70, "int4": 35}),
    ],
)
def test_llama31_weights_match_hf_table(catalog, name: str, published: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    model = catalog.get(name)
    for precision, gb in published.items():
        assert weights_bytes(model, precision) / GB == pytest.approx(gb, rel=0.01)


@pytest.mark.parametrize(("name", "gib"), [("llama3.1-8b", 15.62), ("llama3.1-70b", 39.06)])
def test_llama31_kv_cache_128k_matches_hf_table(catalog, name: str, gib: float) -> None:  # type: ignore[no-untyped-def]
    memory = serve_memory(catalog.get(name), "bf16", context=128_000, concurrency=1)
    assert memory.kv_cache_bytes / GIB == pytest.approx(gib, abs=0.01)  # 2 decimals, truncated


# ---- example 2: https://developer.nvidia.com/blog/mastering-llm-techniques-inference-optimization/
# "Llama 2 7B in 16-bit precision and a batch size of 1: 1 * 4096 * 2 * 32 * 4096 * 2 bytes,
# which is ~2 GB" (MHA: 32 KV heads).


def test_llama2_7b_kv_cache_matches_nvidia_example() -> None:
    llama2 = dense("llama-2-7b", 6.74, layers=32, hidden=4096, heads=32, kv=32)
    memory = serve_memory(llama2, "fp16", context=4096, concurrency=1)
    assert memory.kv_cache_bytes == 1 * 4096 * 2 * 32 * 4096 * 2 == 2 * GIB
    # GQA divides it: the same shape with 8 KV heads keeps a quarter
    assert kv_bytes_per_token(replace(llama2, kv_heads=8)) * 4 == memory.kv_bytes_per_token


# ---- example 3: ZeRO (arXiv 1910.02054, section 3.1): mixed-precision Adam needs 16 bytes per
# parameter (2 fp16 weights + 2 fp16 gradients + 12 optimizer states): "a model with 1.5
# Billion parameters ... at least 24 GB".


def test_full_finetune_model_states_match_zero_paper() -> None:
    gpt2 = dense("gpt-2-1.5b", 1.5, layers=48, hidden=1600, heads=25, kv=25)
    memory = finetune_memory(gpt2, "full", seq_len=1024, batch=1, precision="fp16")
    states = memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes
    assert states == 24 * GB


# ---- example 4: QLoRA (arXiv 2305.14314, abstract and section 1): finetuning a 65B model needs
# "more than 780 GB" in regular 16-bit finetuning and "less than 48 GB" with QLoRA.


def test_qlora_65b_fits_48gb_and_full_exceeds_780gb() -> None:
    llama65 = dense("llama-65b", 65.2, layers=80, hidden=8192, heads=64, kv=64)
    qlora = finetune_memory(llama65, "qlora", seq_len=512, batch=1)
    full = finetune_memory(llama65, "full", seq_len=512, batch=1)
    lora = finetune_memory(llama65, "lora", seq_len=512, batch=1)
    assert qlora.total_bytes < 48 * GB
    assert full.total_bytes > 780 * GB
    assert qlora.total_bytes < lora.total_bytes < full.total_bytes
    assert qlora.trainable_params == lora.trainable_params < full.trainable_params


# ---- example 5: DeepSeek-V2 (arXiv 2405.04434, Table 1): MLA caches (d_c + d_h^R) l elements per
# token, "equal to GQA with only 2.25 groups", with d_c = 4 d_h and d_h^R = d_h / 2.


def test_deepseek_mla_cache_matches_v2_paper(catalog) -> None:  # type: ignore[no-untyped-def]
    v3 = catalog.get("deepseek-v3")
    elements = kv_bytes_per_token(v3) // 2
    assert elements == (512 + 64) * 61 == round(4.5 * 128 * 61)
    # the same model with plain MHA caches 2 x 128 heads x 128 dims per layer: ~57x more
    mha = replace(v3, mla=None)
    assert kv_bytes_per_token(mha) / kv_bytes_per_token(v3) == pytest.approx(56.9, abs=0.1)


# ---- composition and errors


def test_per_card_splits_weights_and_gqa_cache(catalog) -> None:  # type: ignore[no-untyped-def]
    model = catalog.get("qwen2.5-7b")  # 4 KV heads
    memory = serve_memory(model, "bf16", context=32_768, concurrency=4)
    one = per_card_bytes(model, memory, tp=1, pp=1)
    assert one == memory.total_bytes
    two = per_card_bytes(model, memory, tp=2, pp=1)
    assert two == pytest.approx(
        memory.weights_bytes / 2 + memory.kv_cache_bytes / 2 + 2 * GIB, abs=2
    )
    # tp 8 > 4 KV heads: each rank still keeps one whole head, a quarter of the cache
    eight = per_card_bytes(model, memory, tp=8, pp=1)
    assert eight - memory.weights_bytes / 8 - 2 * GIB == pytest.approx(
        memory.kv_cache_bytes / 4, abs=2
    )


def test_mla_cache_is_not_split_by_tensor_rank(catalog) -> None:  # type: ignore[no-untyped-def]
    model = catalog.get("deepseek-r1")
    memory = serve_memory(model, "fp8", context=8192, concurrency=8)
    a = per_card_bytes(model, memory, tp=8, pp=1) - memory.weights_bytes / 8
    b = per_card_bytes(model, memory, tp=4, pp=1) - memory.weights_bytes / 4
    assert a == pytest.approx(b, abs=2)


def test_decode_speed_is_bandwidth_bound(catalog) -> None:  # type: ignore[no-untyped-def]
    model = catalog.get("qwen2.5-7b")
    one = decode_tokens_per_s(model, "bf16", bandwidth_gbps=2039, tp=1, context=1, concurrency=1)
    assert one is not None
    assert one == pytest.approx(2039e9 / (7.61e9 * 2 + 57344), rel=1e-6)  # ~134 tokens/s
    two = decode_tokens_per_s(model, "bf16", bandwidth_gbps=2039, tp=2, context=1, concurrency=1)
    assert two == pytest.approx(2 * one)
    moe = catalog.get("qwen3-30b-a3b")  # reads 3.3B of 30.5B per token
    fast = decode_tokens_per_s(moe, "bf16", bandwidth_gbps=2039, tp=1, context=1, concurrency=1)
    assert fast is not None and fast == pytest.approx(one * 7.61 / 3.3, rel=0.001)
    assert (
        decode_tokens_per_s(model, "bf16", bandwidth_gbps=None, tp=1, context=1, concurrency=1)
        is None
    )


def test_bad_inputs_name_the_field(catalog) -> None:  # type: ignore[no-untyped-def]
    model = catalog.get("qwen2.5-7b")
    with pytest.raises(RequestError) as bad:
        serve_memory(model, "fp32", context=10, concurrency=1)
    assert bad.value.field == "precision"
    with pytest.raises(RequestError) as bad:
        serve_memory(model, "bf16", context=0, concurrency=1)
    assert bad.value.field == "context"
    with pytest.raises(RequestError) as bad:
        finetune_memory(model, "dora", seq_len=10)
    assert bad.value.field == "method"
