"""Plans for the issue's pool: A100-80GB, L20-48GB, Ascend 910B-64GB and MLU370-48GB nodes."""

from __future__ import annotations

import pytest

from xpupool.catalog import load_accelerators
from xpupool.catalog.models import load_models
from xpupool.catalog.plan import PlanInput, PlanRow, PoolNode, plan
from xpupool.model.errors import RequestError

POOL = [
    PoolNode("a100", "nvidia", "A100-SXM4-80GB", 81920, 8, 8, True, 8, 8),
    PoolNode("l20", "nvidia", "L20", 46068, 8, 8, False, 8, 8),
    PoolNode("ascend", "huawei", "910B3", 65536, 8, 8, True, 8, 8),
    PoolNode("mlu", "cambricon", "MLU370-X8", 49152, 8, 4, True, 2, 2),
]
POOL_MODELS = {n.device_model for n in POOL}


def rows_for(name: str, pool: list[PoolNode] | None = POOL, **kw: object) -> dict[str, PlanRow]:
    model = load_models().get(name)
    rows = plan(PlanInput(model, **kw), load_accelerators(), load_models(), pool)  # type: ignore[arg-type]
    return {r.device_model: r for r in rows}


def test_72b_bf16_needs_tensor_parallel_on_every_pool_card() -> None:
    rows = rows_for("qwen2.5-72b", precision="bf16")
    for name in POOL_MODELS:
        row = rows[name]
        assert row.feasible and row.nodes == 1, row
        assert row.tensor_parallel > 1 and 64 % row.tensor_parallel == 0, row
        assert row.memory_per_card_mib * (1 << 20) <= 0.9 * row.card_memory_mib * (1 << 20)
    assert rows["L20"].link == "pcie (slower)"
    assert rows["A100-SXM4-80GB"].link == "nvlink"
    # the MLU node has only 2 free cards in a group: tp 2 would fit 48 GB? 72.7e9*2/2 = 67.7 GiB: no
    assert rows["MLU370-X8"].tensor_parallel == 4 and rows["MLU370-X8"].fits_now is False
    assert rows["A100-SXM4-80GB"].fits_now is True


def test_7b_fits_one_card_of_each() -> None:
    rows = rows_for("qwen2.5-7b", precision="bf16")
    for name in POOL_MODELS:
        row = rows[name]
        assert (row.cards, row.tensor_parallel, row.nodes) == (1, 1, 1), row
        assert row.fits_now is True
    assert rows["A100-SXM4-80GB"].runtime == "vllm-cuda"
    assert rows["910B3"].runtime == "vllm-ascend"
    assert rows["MLU370-X8"].runtime is None  # no public Cambricon serving image catalogued
    # bandwidth bound: the A100 (2039 GB/s) decodes faster than the L20 (864 GB/s)
    a100, l20 = rows["A100-SXM4-80GB"].est_tokens_per_s, rows["L20"].est_tokens_per_s
    assert a100 is not None and l20 is not None and a100 > 2 * l20


def test_rows_cover_catalog_and_pool_and_rank_fitting_first() -> None:
    odd = PoolNode("x", "nvidia", "Mystery GPU", 24576, 4, 4, False, 4, 4)
    model = load_models().get("qwen2.5-7b")
    rows = plan(PlanInput(model), load_accelerators(), load_models(), [*POOL, odd])
    names = [r.device_model for r in rows]
    assert len(names) == len(load_accelerators().models) + 1 and "Mystery GPU" in names
    fitting = [r.fits_now for r in rows]
    assert fitting == sorted(fitting, key=lambda f: f is not True)
    assert rows[0].fits_now and rows[0].cards == 1
    offline = plan(PlanInput(model), load_accelerators(), load_models(), None)
    assert all(r.fits_now is None for r in offline)


def test_deepseek_full_precision_spans_nodes() -> None:
    rows = rows_for("deepseek-v3", pool=None, precision="bf16")
    a100 = rows["A100-SXM4-80GB"]  # 1.34 TB of bf16 weights: 8 x 80 GB is not enough
    assert a100.feasible and a100.nodes >= 2 and a100.pipeline_parallel == a100.nodes
    assert a100.tensor_parallel == 8 and a100.expert_parallel
    h200 = rows_for("deepseek-r1", pool=None, precision="fp8")["H200-SXM5-141GB"]
    assert (h200.nodes, h200.tensor_parallel) == (1, 8)  # the usual single-node FP8 setup


def test_finetune_methods_order() -> None:
    full = rows_for("qwen2.5-7b", task="finetune", method="full")["A100-SXM4-80GB"]
    lora = rows_for("qwen2.5-7b", task="finetune", method="lora")["A100-SXM4-80GB"]
    qlora = rows_for("qwen2.5-7b", task="finetune", method="qlora")["L20"]
    assert full.cards >= 2 and lora.cards == 1 and qlora.cards == 1
    assert full.est_tokens_per_s is None and full.runtime is None


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"precision": "fp32"}, "precision"),
        ({"context": 10**9}, "context"),
        ({"concurrency": 0}, "concurrency"),
        ({"task": "train"}, "task"),
        ({"method": "lora"}, "method"),
    ],
)
def test_bad_input_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as bad:
        rows_for("qwen2.5-7b", **kw)
    assert bad.value.field == field
