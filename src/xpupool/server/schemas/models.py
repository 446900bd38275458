"""Models of the catalog and the plans made for them (``GET /v1/models``, ``POST /v1/plan``): a
model and a task instead of a device request (docs/models.md). ``JobIn.model`` is a
:class:`ModelJob`, so the jobs module imports this one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from xpupool.server.schemas.base import Lenient, Strict

Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


class ModelIntent(Strict):
    """A model and a task instead of a device request: the server plans the cards
    (docs/models.md). Shared by ``POST /v1/plan`` and ``JobIn.model``."""

    name: str = Field(
        min_length=1,
        max_length=100,
        description="A model of the catalog ('qwen2.5-7b'; GET /v1/models lists them).",
    )
    task: Literal["serve", "finetune"] = Field("serve", description="What the model is for.")
    precision: Precision | None = Field(
        None, description="Weight precision; null = the model's native precision."
    )
    context: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Tokens per sequence (serve) or per sample (finetune); null = min(8192, the "
        "model's maximum).",
    )
    concurrency: int = Field(
        1, ge=1, le=4096, description="Sequences served at once (serve) or the batch (finetune)."
    )
    method: Literal["full", "lora", "qlora"] | None = Field(
        None, description="Fine-tuning method; null = lora for finetune; only with finetune."
    )


class ModelJob(ModelIntent):
    """``JobIn.model``: what to serve; the server fills the job's request, image and command."""

    model_path: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="A local or shared path the runtime loads the weights from; null = the "
        "model's hub id (the runtime downloads it when the job runs; xpupool never does).",
    )


class PlanRow(Lenient):
    """One card type's plan (docs/models.md)."""

    device_model: str = Field(description="Catalog card name, or the name the pool prints.")
    vendor: str
    in_pool: int = Field(description="Cards of this type in the pool; 0 offline or absent.")
    card_memory_mib: int
    cards: int = Field(description="Cards in all: tensor_parallel x nodes (serve).")
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    memory_per_card_mib: int
    est_tokens_per_s: float | None = Field(
        description="Bandwidth-bound decode upper bound, all sequences together; null: unknown."
    )
    power_watts: int | None = Field(description="cards x board power; null: not published.")
    link: str = Field(description="nvlink, hccs, ... or 'pcie (slower)' for a PCIe tp group.")
    runtime: str | None = Field(description="Serving runtime for this vendor; null: none known.")
    feasible: bool
    fits_now: bool | None = Field(description="Can the pool place it now; null offline.")
    reason: str = ""


class CatalogModel(Lenient):
    """A model of the catalog (``GET /v1/models``)."""

    name: str
    aliases: list[str]
    hub_id: str
    kind: str
    params_b: float
    active_params_b: float | None
    layers: int | None
    hidden_size: int | None
    attention_heads: int | None
    kv_heads: int | None
    head_dim: int | None
    max_context: int
    native_precision: str
    precisions: list[str]
    runtimes: list[str]
    source: str
