"""Which cards, how many, and how split: one plan row per card type for a model and a task.

Pure: the pool arrives as plain :class:`PoolNode` records (built by the server from its node
records and the engine's free capacity), so the same function answers offline (catalog only) and
against a server (adds the pool's card types and ``fits_now``). For each card type it finds the
smallest tensor-parallel group that holds the model on one node (a divisor of the attention heads
that fits inside one NVLink/HCCS group, or the node's single PCIe group, marked slower), else
pipeline stages across nodes, then sizes memory per card, decode speed and power, and ranks the
rows. Formulas: docs/models.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from xpupool.catalog.accelerators import AcceleratorCatalog, AcceleratorModel
from xpupool.catalog.models import ModelCatalog, ModelSpec
from xpupool.catalog.sizing import (
    MIB,
    check_precision,
    decode_tokens_per_s,
    finetune_memory,
    per_card_bytes,
    serve_memory,
    usable_card_bytes,
)
from xpupool.model.errors import RequestError

TASKS = ("serve", "finetune")
CATALOG_NODE_CARDS = 8  # a catalog row assumes the common 8-card server
MAX_NODES = 64  # a plan needing more nodes than this is reported as not feasible
DEFAULT_CONTEXT = 8192


@dataclass(frozen=True, slots=True)
class PlanInput:
    """What to plan: ``context`` tokens per sequence (or per training sample) and
    ``concurrency`` sequences (or the batch); ``method`` only for ``finetune``."""

    model: ModelSpec
    task: str = "serve"
    precision: str | None = None  # None: the model's native precision
    context: int | None = None  # None: min(8192, the model's max context)
    concurrency: int = 1
    method: str | None = None

    def resolved(self) -> PlanInput:
        """Defaults filled in and every field checked; errors name the field."""
        if self.task not in TASKS:
            raise RequestError("task", self.task, f"expected one of {', '.join(TASKS)}")
        precision = self.precision or self.model.native_precision
        check_precision(self.model, precision)
        context = self.context or min(DEFAULT_CONTEXT, self.model.max_context)
        if self.context is not None and not 1 <= self.context <= self.model.max_context:
            reason = f"must be 1..{self.model.max_context} tokens for {self.model.name}"
            raise RequestError("context", self.context, reason)
        if not 1 <= self.concurrency <= 4096:
            raise RequestError("concurrency", self.concurrency, "must be 1..4096")
        method = self.method
        if self.task == "finetune":
            method = method or "lora"
        elif method is not None:
            raise RequestError("method", method, "only a finetune task takes a method")
        return replace(self, precision=precision, context=context, method=method)


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One node's cards of one model, as the pool sees them now.

    ``group_cards``: the most cards sharing one fast-link group (all the node's cards when
    ``fast_link`` is false: one PCIe group); ``free_group_cards``: the most wholly free cards
    inside one such group right now.
    """

    name: str
    vendor: str
    device_model: str  # the catalog's canonical name, or the printed name when unknown
    card_mib: int
    cards: int
    group_cards: int
    fast_link: bool
    free_cards: int
    free_group_cards: int


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One card type's plan. ``feasible`` false: no split up to :data:`MAX_NODES` holds it
    (``reason`` says why; the sizes are the largest tried). ``fits_now``: None offline; else
    whether enough of the pool's nodes have that many free cards in one group now."""

    device_model: str
    vendor: str
    in_pool: int  # cards of this type in the pool; 0 offline or when absent
    card_memory_mib: int
    cards: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    memory_per_card_mib: int
    est_tokens_per_s: float | None
    power_watts: int | None
    link: str
    runtime: str | None
    feasible: bool
    fits_now: bool | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class _CardType:
    vendor: str
    name: str
    card_mib: int
    node_cards: int
    group_cards: int
    fast_link: bool
    spec: AcceleratorModel | None
    nodes: tuple[PoolNode, ...]


def plan(
    request: PlanInput,
    accelerators: AcceleratorCatalog,
    models: ModelCatalog,
    pool: Sequence[PoolNode] | None = None,
    judge: Callable[[PlanRow], PlanRow] | None = None,
) -> list[PlanRow]:
    """Rows for every catalog card type and every pool card type, best first.

    ``pool`` None: offline (``fits_now`` None, catalog nodes of 8 cards). ``judge``: the
    scheduler's word on each row before ranking (a row its engine would refuse does not fit,
    whatever the free cards say). Raises :class:`RequestError` naming ``precision``,
    ``context``, ``concurrency``, ``task`` or ``method`` for bad input.
    """
    req = request.resolved()
    rows = [_row(req, card, models, pool is not None) for card in _card_types(accelerators, pool)]
    if judge is not None:
        rows = [judge(row) for row in rows]
    return sorted(rows, key=_rank)


def _rank(row: PlanRow) -> tuple[object, ...]:
    speed = row.est_tokens_per_s or 0.0
    return (not row.feasible, row.fits_now is False, row.nodes, row.cards, -speed, row.device_model)


def _card_types(catalog: AcceleratorCatalog, pool: Sequence[PoolNode] | None) -> list[_CardType]:
    by_model: dict[tuple[str, str], list[PoolNode]] = {}
    for node in pool or ():
        by_model.setdefault((node.vendor, node.device_model), []).append(node)
    types: list[_CardType] = []
    for spec in catalog.models:
        found = tuple(by_model.pop((spec.vendor, spec.name), ()))
        types.append(_card_type(spec.vendor, spec.name, spec, found))
    for (vendor, name), rest in sorted(by_model.items()):
        types.append(_card_type(vendor, name, catalog.lookup(name, vendor), tuple(rest)))
    return types


def _card_type(
    vendor: str, name: str, spec: AcceleratorModel | None, nodes: tuple[PoolNode, ...]
) -> _CardType:
    if nodes:
        biggest = max(nodes, key=lambda n: (n.group_cards, n.cards))
        return _CardType(
            vendor,
            name,
            min(n.card_mib for n in nodes),
            biggest.cards,
            biggest.group_cards,
            biggest.fast_link,
            spec,
            nodes,
        )
    assert spec is not None
    fast = spec.link != "pcie"
    card_mib = int(spec.memory_gib * 1024)
    return _CardType(vendor, name, card_mib, CATALOG_NODE_CARDS, CATALOG_NODE_CARDS, fast, spec, ())


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _row(req: PlanInput, card: _CardType, models: ModelCatalog, online: bool) -> PlanRow:
    model = req.model
    assert req.precision is not None and req.context is not None
    usable = usable_card_bytes(card.card_mib)
    if req.task == "serve":
        tp, pp, per_card, feasible, reason = _serve_split(req, card, usable)
        tokens = None
        if feasible:
            bandwidth = card.spec.memory_bandwidth_gbps if card.spec else None
            tokens = decode_tokens_per_s(
                model,
                req.precision,
                bandwidth_gbps=bandwidth,
                tp=tp,
                context=req.context,
                concurrency=req.concurrency,
            )
        cards_per_node, nodes = tp, pp
        runtime = models.runtime_for(model, card.vendor, req.precision)
    else:
        cards_per_node, nodes, per_card, feasible, reason = _finetune_split(req, card, usable)
        tp, pp, tokens, runtime = 1, 1, None, None
    cards = cards_per_node * nodes
    tdp = card.spec.tdp_watts if card.spec else None
    if req.task == "serve" and cards_per_node > 1 and not card.fast_link:
        link = "pcie (slower)"
    else:
        link = card.spec.link if card.spec and card.fast_link else "pcie"
    fits_now: bool | None = None
    if online:
        fits_now = feasible and _fits_now(card.nodes, cards_per_node, nodes, per_card)
    return PlanRow(
        device_model=card.name,
        vendor=card.vendor,
        in_pool=sum(n.cards for n in card.nodes),
        card_memory_mib=card.card_mib,
        cards=cards,
        nodes=nodes,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        expert_parallel=req.task == "serve" and model.is_moe and cards > 1,
        memory_per_card_mib=math.ceil(per_card / MIB),
        est_tokens_per_s=None if tokens is None else round(tokens, 1),
        power_watts=None if tdp is None else tdp * cards,
        link=link,
        runtime=None if runtime is None else runtime.name,
        feasible=feasible,
        fits_now=fits_now,
        reason=reason,
    )


def _serve_split(req: PlanInput, card: _CardType, usable: int) -> tuple[int, int, int, bool, str]:
    """(tp, pp, bytes per card, feasible, reason): the smallest tp on one node, else pp nodes."""
    model = req.model
    assert req.precision is not None and req.context is not None
    memory = serve_memory(model, req.precision, context=req.context, concurrency=req.concurrency)
    heads = model.attention_heads or 1
    tps = _divisors(heads, card.group_cards) if model.kind != "vision" else [1]
    for tp in tps:
        per_card = per_card_bytes(model, memory, tp=tp, pp=1)
        if per_card <= usable:
            return tp, 1, per_card, True, ""
    tp = tps[-1]
    layers = model.layers or 1
    for pp in range(2, min(MAX_NODES, layers) + 1):
        per_card = per_card_bytes(model, memory, tp=tp, pp=pp)
        if per_card <= usable:
            return tp, pp, per_card, True, ""
    pp = min(MAX_NODES, layers)
    per_card = per_card_bytes(model, memory, tp=tp, pp=pp)
    reason = f"needs more than {pp} nodes of {tp} cards"
    if memory.overhead_bytes >= usable:
        reason = "the runtime's overhead alone exceeds the card"
    return tp, pp, per_card, False, reason


def _finetune_split(
    req: PlanInput, card: _CardType, usable: int
) -> tuple[int, int, int, bool, str]:
    """(cards per node, nodes, bytes per card, feasible, reason): the footprint sharded evenly
    (ZeRO-3/FSDP) over the fewest cards, filling a node before adding the next."""
    assert req.method is not None and req.context is not None and req.precision is not None
    precision = req.precision if req.precision in ("bf16", "fp16", "fp32") else "bf16"
    memory = finetune_memory(
        req.model, req.method, seq_len=req.context, batch=req.concurrency, precision=precision
    )
    shardable = memory.total_bytes - memory.overhead_bytes - memory.activations_bytes
    fixed = memory.overhead_bytes + memory.activations_bytes
    if fixed >= usable:
        return 1, 1, fixed + shardable, False, "activations and overhead exceed one card"
    cards = max(1, math.ceil(shardable / (usable - fixed)))
    nodes = math.ceil(cards / card.node_cards)
    per_node = math.ceil(cards / nodes)
    per_card = math.ceil(shardable / (per_node * nodes)) + fixed
    if nodes > MAX_NODES:
        return per_node, nodes, per_card, False, f"needs more than {MAX_NODES} nodes"
    return per_node, nodes, per_card, True, ""


def _fits_now(nodes: Iterable[PoolNode], per_node: int, count: int, per_card: int) -> bool:
    """Are there ``count`` nodes with ``per_node`` wholly free cards of at least ``per_card``
    usable bytes, inside one link group when ``per_node`` > 1?"""
    ready = [
        n
        for n in nodes
        if n.free_group_cards >= per_node and usable_card_bytes(n.card_mib) >= per_card
    ]
    return len(ready) >= count
