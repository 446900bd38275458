"""How much memory a model needs, and how fast it can decode: the formulas of docs/models.md.

Pure arithmetic on a :class:`~xpupool.catalog.models.ModelSpec`; no I/O, no catalog lookups, so
the planner, the server and the tests all size the same way. Serving memory is weights + KV cache
(context x concurrency, GQA and MLA aware) + a per-card runtime overhead; fine-tuning memory is
weights + gradients + optimizer states + activations for ``full``, ``lora`` and ``qlora``. Decode
speed is bounded by memory bandwidth: every generated token reads the active weights and the KV
cache once. Each formula is checked against published worked examples in
tests/unit/catalog/test_sizing.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xpupool.catalog.models import PRECISION_BYTES, ModelSpec
from xpupool.model.errors import RequestError

GIB = 1 << 30
MIB = 1 << 20
# Per card: the runtime's CUDA/CANN context, the activations of one forward pass and captured
# graphs. An assumption (vLLM profiles it at start), stated in docs/models.md.
RUNTIME_OVERHEAD_BYTES = 2 * GIB
# The share of a card a serving runtime takes: vLLM's --gpu-memory-utilization default
# (https://docs.vllm.ai/en/v0.8.5/serving/engine_args.html).
MEMORY_UTILIZATION = 0.9
METHODS = ("full", "lora", "qlora")
LORA_RANK = 16  # adapters on q, k, v, o of every layer (docs/models.md)
# Mixed-precision Adam keeps per trainable parameter: an fp32 master copy, momentum and variance
# (12 bytes) besides the 16-bit weight and gradient (ZeRO, arXiv 1910.02054 section 3.1).
ADAM_STATE_BYTES = 12
GRAD_BYTES = 2


@dataclass(frozen=True, slots=True)
class ServeMemory:
    """Serving memory for one model, precision, context and concurrency, in bytes.

    ``kv_cache_bytes`` is the whole cache (every sequence at full context);
    ``overhead_bytes`` is per card and added once per card by :meth:`per_card_bytes`.
    """

    weights_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    overhead_bytes: int

    @property
    def total_bytes(self) -> int:
        """On one card (no parallelism)."""
        return self.weights_bytes + self.kv_cache_bytes + self.overhead_bytes


@dataclass(frozen=True, slots=True)
class FinetuneMemory:
    """Fine-tuning memory, bytes, for one replica holding the whole model (no sharding)."""

    weights_bytes: int
    trainable_params: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    overhead_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.overhead_bytes
        )


def check_precision(model: ModelSpec, precision: str, field: str = "precision") -> None:
    """A :class:`RequestError` on ``field`` unless ``model`` is served in ``precision``."""
    if precision not in model.precisions:
        reason = f"{model.name} is served in {', '.join(model.precisions)}"
        raise RequestError(field, precision, reason)


def weights_bytes(model: ModelSpec, precision: str) -> int:
    """All parameters (every expert of an MoE is resident) at ``precision``'s bytes per weight."""
    return round(model.params_b * 1e9 * PRECISION_BYTES[precision])


def active_weights_bytes(model: ModelSpec, precision: str) -> int:
    """The weights one decode step reads: the active parameters for an MoE, else all."""
    params = model.active_params_b if model.active_params_b is not None else model.params_b
    return round(params * 1e9 * PRECISION_BYTES[precision])


def kv_bytes_per_token(model: ModelSpec, kv_precision: str = "bf16") -> int:
    """Bytes the KV cache keeps per token of one sequence.

    GQA/MHA: ``2 (K and V) x layers x kv_heads x head_dim x bytes``. MLA (DeepSeek): one latent
    per layer, ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes`` (DeepSeek-V2, arXiv
    2405.04434, Table 1). Encoders and vision models keep no cache between requests: 0.
    """
    if model.kind != "decoder":
        return 0
    assert model.layers is not None and model.kv_heads is not None and model.head_dim is not None
    size = PRECISION_BYTES[kv_precision]
    if model.mla is not None:
        latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        return round(model.layers * latent * size)
    return round(2 * model.layers * model.kv_heads * model.head_dim * size)


def kv_precision_for(precision: str) -> str:
    """The KV cache's precision: the activations' dtype, 16-bit for quantised weights (vLLM's
    ``--kv-cache-dtype auto``), fp32 only for an fp32 model."""
    return "fp32" if precision == "fp32" else "bf16"


def serve_memory(
    model: ModelSpec, precision: str, *, context: int, concurrency: int
) -> ServeMemory:
    """Memory to serve ``concurrency`` sequences of ``context`` tokens each."""
    check_precision(model, precision)
    if context < 1:
        raise RequestError("context", context, "must be at least 1 token")
    if concurrency < 1:
        raise RequestError("concurrency", concurrency, "must be at least 1")
    per_token = kv_bytes_per_token(model, kv_precision_for(precision))
    return ServeMemory(
        weights_bytes=weights_bytes(model, precision),
        kv_cache_bytes=per_token * context * concurrency,
        kv_bytes_per_token=per_token,
        overhead_bytes=RUNTIME_OVERHEAD_BYTES,
    )


def per_card_bytes(model: ModelSpec, memory: ServeMemory, *, tp: int, pp: int) -> int:
    """Bytes on each of ``tp x pp`` cards: weights split over all cards; the KV cache split over
    pipeline stages and over tensor ranks by KV head (a rank holds at least one KV head, so
    ``tp > kv_heads`` replicates heads); an MLA latent is not split by head, so every tensor rank
    keeps its stage's whole latent cache; plus the overhead on every card."""
    weights = math.ceil(memory.weights_bytes / (tp * pp))
    kv_stage = memory.kv_cache_bytes / pp
    if model.mla is not None or model.kv_heads is None:
        kv = kv_stage
    else:
        kv = kv_stage * math.ceil(model.kv_heads / tp) / model.kv_heads
    return weights + math.ceil(kv) + memory.overhead_bytes


def usable_card_bytes(card_mib: int) -> int:
    """What a serving runtime may use of a card of ``card_mib``: :data:`MEMORY_UTILIZATION`."""
    return int(card_mib * MIB * MEMORY_UTILIZATION)


def lora_params(model: ModelSpec, rank: int = LORA_RANK) -> int:
    """Trainable LoRA parameters: ``rank x (d_in + d_out)`` for q, k, v and o of every layer."""
    if model.kind == "vision" or model.layers is None:
        return round(model.params_b * 1e9 * 0.01)  # no attention figures: 1 % adapters
    assert model.hidden_size and model.attention_heads and model.kv_heads and model.head_dim
    h = model.hidden_size
    q_out = model.attention_heads * model.head_dim
    kv_out = model.kv_heads * model.head_dim
    per_layer = (h + q_out) + 2 * (h + kv_out) + (q_out + h)
    return model.layers * rank * per_layer


def activations_bytes(model: ModelSpec, *, seq_len: int, batch: int) -> int:
    """Activations with full gradient checkpointing: each layer keeps its 16-bit input
    (``2 s b h``) and one layer at a time is recomputed with all its activations,
    ``s b h (34 + 5 a s / h)`` (Korthikanti et al., arXiv 2205.05198, eq. 1)."""
    if model.layers is None or model.hidden_size is None or model.attention_heads is None:
        return round(model.params_b * 1e9 * 2 * batch)  # CNN: about one fp16 copy per image
    s, b, h, a = seq_len, batch, model.hidden_size, model.attention_heads
    checkpoints = model.layers * 2 * s * b * h
    one_layer = s * b * h * (34 + 5 * a * s / h)
    return round(checkpoints + one_layer)


def finetune_memory(
    model: ModelSpec, method: str, *, seq_len: int, batch: int = 1, precision: str = "bf16"
) -> FinetuneMemory:
    """Memory to fine-tune ``model`` with ``method``:

    - ``full``: 16-bit weights and gradients plus Adam's 12 bytes per parameter (16 bytes/param);
    - ``lora``: frozen 16-bit base, adapters trained with gradients and Adam states;
    - ``qlora``: frozen 4-bit base (NF4, 0.5 bytes/param), adapters as LoRA (Dettmers et al.,
      arXiv 2305.14314).

    Activations per :func:`activations_bytes`; plus :data:`RUNTIME_OVERHEAD_BYTES`.
    """
    if method not in METHODS:
        raise RequestError("method", method, f"expected one of {', '.join(METHODS)}")
    if seq_len < 1:
        raise RequestError("context", seq_len, "must be at least 1 token")
    if batch < 1:
        raise RequestError("concurrency", batch, "must be at least 1")
    params = round(model.params_b * 1e9)
    if method == "full":
        base = weights_bytes(model, precision)
        trainable = params
    else:
        base = weights_bytes(model, "int4" if method == "qlora" else precision)
        trainable = lora_params(model)
    extra = 2 * trainable if method != "full" else 0  # the adapters' own 16-bit weights
    return FinetuneMemory(
        weights_bytes=base + extra,
        trainable_params=trainable,
        gradients_bytes=GRAD_BYTES * trainable,
        optimizer_bytes=ADAM_STATE_BYTES * trainable,
        activations_bytes=activations_bytes(model, seq_len=seq_len, batch=batch),
        overhead_bytes=RUNTIME_OVERHEAD_BYTES,
    )


def decode_tokens_per_s(
    model: ModelSpec,
    precision: str,
    *,
    bandwidth_gbps: float | None,
    tp: int,
    context: int,
    concurrency: int,
) -> float | None:
    """Bandwidth-bound decode throughput, tokens/s summed over ``concurrency`` sequences.

    One decode step produces a token for every sequence and reads the active weights once and
    every sequence's KV cache (at full ``context``, the worst case) once, spread over the ``tp``
    cards of a stage; pipeline stages run one after another, so they add no bandwidth:
    ``concurrency x tp x bandwidth / (active weights + KV cache)``. An upper bound (no compute,
    communication or scheduling time); None when the card's bandwidth or the model's token
    count is unknown (encoders and vision models do not decode).
    """
    if bandwidth_gbps is None or model.kind != "decoder":
        return None
    step_bytes = active_weights_bytes(model, precision) + (
        kv_bytes_per_token(model, kv_precision_for(precision)) * context * concurrency
    )
    return concurrency * tp * bandwidth_gbps * 1e9 / step_bytes
