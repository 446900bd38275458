"""``xpupool plan`` and ``xpupool models``: which cards serve a model, and the models known.

``plan`` works offline (``--catalog-only``: the catalog's card types, nodes of 8 cards, no
``fits_now``) and against a server (``POST /v1/plan``: the pool's card types and what fits now).
The model options are shared with ``submit --model`` (docs/models.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import click

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    emit,
    make_client,
    output_option,
)
from xpupool.client._errors import Unreachable
from xpupool.client._render import _columns
from xpupool.client.fit_table import FitTable
from xpupool.model.errors import RequestError

if TYPE_CHECKING:  # imported where they are used: `xpupool jobs` imports this module too
    from xpupool.server.schemas.models import CatalogModel, ModelIntent, PlanRow
    from xpupool.server.schemas.throughput import MeasuredSpeed

F = TypeVar("F", bound=Callable[..., Any])
_CONTEXT = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")


def parse_context(text: str | None) -> int | None:
    """``--context``: tokens, with ``k`` = 1024 and ``m`` = 1024 x 1024 (``32k`` = 32768)."""
    if text is None:
        return None
    match = _CONTEXT.match(text)
    if match is None:
        raise RequestError("--context", text, "use a token count such as 4096, 32k or 1m")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * {"": 1, "k": 1024, "m": 1024 * 1024}[unit]


def model_options(func: F) -> F:
    """--task --precision --context --concurrency --method (the model is given by the caller)."""
    options = [
        click.option(
            "--task", type=click.Choice(["serve", "finetune"]), default="serve", show_default=True
        ),
        click.option(
            "--precision",
            type=click.Choice(["fp32", "bf16", "fp16", "fp8", "int8", "int4"]),
            help="weight precision [default: the model's native one]",
        ),
        click.option("--context", help="tokens per sequence: 4096, 32k [default: min(8k, max)]"),
        click.option(
            "--concurrency",
            type=click.IntRange(1, 4096),
            default=1,
            show_default=True,
            help="sequences at once (serve) or batch (finetune)",
        ),
        click.option(
            "--method",
            type=click.Choice(["full", "lora", "qlora"]),
            help="finetune method [default: lora]",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def intent(
    model: str,
    task: str,
    precision: str | None,
    context: str | None,
    concurrency: int,
    method: str | None,
) -> dict[str, Any]:
    """The ``model`` block's fields from the options (validated by the schema)."""
    body: dict[str, Any] = {"name": model, "task": task, "concurrency": concurrency}
    for key, value in (
        ("precision", precision),
        ("context", parse_context(context)),
        ("method", method),
    ):
        if value is not None:
            body[key] = value
    return body


def offline_plan(body: ModelIntent) -> list[PlanRow]:
    """The catalog-only plan, computed here exactly as the server would without a pool."""
    from xpupool.catalog import load_accelerators
    from xpupool.catalog.models import load_models
    from xpupool.catalog.plan import PlanInput, plan
    from xpupool.server.schemas.models import PlanRow

    models = load_models()
    request = PlanInput(
        models.get(body.name, "--model"),
        task=body.task,
        precision=body.precision,
        context=body.context,
        concurrency=body.concurrency,
        method=body.method,
    )
    rows = plan(request, load_accelerators(), models, None)
    return [PlanRow.model_validate(asdict(r)) for r in rows]


@click.command("plan", epilog=CONNECTION_HELP)
@click.option("--model", "model", required=True, help="a catalog model (xpupool models)")
@model_options
@click.option("--catalog-only", is_flag=True, help="plan from the catalog, without a server")
@click.option("--all", "show_all", is_flag=True, help="also card types that cannot hold it")
@connection_options
@output_option
def plan_command(
    model: str,
    task: str,
    precision: str | None,
    context: str | None,
    concurrency: int,
    method: str | None,
    catalog_only: bool,
    show_all: bool,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Which cards serve (or fine-tune) a model: per card type the cards, nodes, tensor and
    pipeline parallelism, memory per card, estimated decode tokens/s, power and whether the
    pool can place it now, best first.

    \b
    xpupool plan --model qwen2.5-72b --task serve --context 32k --concurrency 16
    xpupool plan --model deepseek-r1 --precision fp8 --catalog-only -o json
    """
    from xpupool.server.schemas.models import ModelIntent

    body = ModelIntent.model_validate(intent(model, task, precision, context, concurrency, method))
    measured: list[MeasuredSpeed] = []
    if catalog_only:
        rows = offline_plan(body)
    else:
        try:
            with make_client(url, token) as client:
                rows = client.plan(body)
                if output == "table" and task == "serve":
                    measured = client.measured_speeds(kind=model_kind(model))
        except Unreachable as exc:
            raise click.ClickException(
                f"{exc}; 'xpupool plan --catalog-only' plans from the catalog without a server"
            ) from None
    if not show_all and output == "table":
        rows = [r for r in rows if r.feasible]
    emit(output, rows, lambda: plan_table(rows))
    if output == "table" and rows:
        click.echo(f"expected speed: {speed_line(rows, measured)}")


def model_kind(name: str) -> str:
    """The job type a ``submit --model`` job of ``name`` is measured under: the catalog's name
    of the model (``server/services/models.py``), or ``name`` as given when this catalog lacks
    it (the server's may not)."""
    from xpupool.catalog.models import load_models

    found = load_models().lookup(name)
    return name if found is None else found.name


def speed_line(rows: Sequence[PlanRow], measured: Sequence[MeasuredSpeed] = ()) -> str:
    """Each feasible card type's decode speed relative to the fastest, and where the figures
    come from (``catalog/throughput.py``): measured by the caller's serving jobs of the model
    once two card types are (``measured``, one tenant's; an admin reading several tenants'
    gets estimates), else the plan's estimates: ``H100-SXM5-80GB: 1.0x, A100-SXM4-80GB: 0.6x
    (estimated)``."""
    from xpupool.catalog.throughput import Measured, ThroughputTable, card_speeds, describe

    rates = {r.device_model: r.est_tokens_per_s for r in rows if r.feasible and r.est_tokens_per_s}
    table = ThroughputTable()
    if len({(m.tenant, m.kind) for m in measured}) == 1:
        for m in measured:
            table.put(m.kind, m.model, Measured(m.rate, m.runs, m.reports))
    kind = measured[0].kind if measured else "llm-decode"
    names = [r.device_model for r in rows if r.feasible]
    speeds = card_speeds(kind, names, table=table, estimate=rates)
    return describe(speeds) or "unknown"


def plan_table(rows: Sequence[PlanRow]) -> FitTable:
    names = ["device", "vendor", "cards", "nodes", "tp", "pp", "mem/card", "tok/s", "power"]
    names += ["link", "runtime", "fits"]
    columns = _columns(
        *names,
        text=("fits",),
        spare=("power", "pp", "nodes", "vendor", "link"),  # left out first on a narrow terminal
        same=("vendor", "runtime"),
    )
    table = FitTable(columns, f"{len(rows)} plans")
    for r in rows:
        fits = "-" if r.fits_now is None else ("yes" if r.fits_now else "no")
        if r.fits_now is False and r.reason:  # can never fit: the submission's verdict says why
            fits = f"no ({r.reason})"
        table.add_row(
            r.device_model,
            r.vendor,
            str(r.cards),
            str(r.nodes),
            str(r.tensor_parallel),
            str(r.pipeline_parallel),
            f"{r.memory_per_card_mib / 1024:.1f}Gi",
            "-" if r.est_tokens_per_s is None else f"{r.est_tokens_per_s:,.0f}",
            "-" if r.power_watts is None else f"{r.power_watts}W",
            r.link,
            r.runtime or "-",
            fits if r.feasible else f"no ({r.reason})",
        )
    return table


@click.command("models", epilog=CONNECTION_HELP)
@click.option("--catalog-only", is_flag=True, help="the catalog shipped here, without a server")
@connection_options
@output_option
def models_command(catalog_only: bool, url: str | None, token: str | None, output: str) -> None:
    """List the models plan and submit --model know: parameters, context, precisions, runtimes."""
    if catalog_only:
        from xpupool.catalog.models import load_models
        from xpupool.server.schemas.models import CatalogModel

        rows = [
            CatalogModel.model_validate(
                {**asdict(m), "aliases": list(m.aliases), "precisions": list(m.precisions)}
                | {"runtimes": list(m.runtimes)}
            )
            for m in load_models().models
        ]
    else:
        with make_client(url, token) as client:
            rows = client.models()
    emit(output, rows, lambda: models_table(rows))


def models_table(rows: Sequence[CatalogModel]) -> FitTable:
    """The catalog's models, one a row. Names and numbers are fixed cells (docs/cli.md: never
    cut); at 80 columns they and the precisions cannot all fit beside the hub id and runtimes
    (issue 42), so those two give way first, said in the title: the name is what ``plan`` and
    ``submit --model`` take, the hub id only says where the weights come from."""
    names = ["model", "hub id", "params", "active", "context", "precisions", "runtimes"]
    columns = _columns(*names, text=("precisions", "runtimes"), spare=("hub id", "runtimes"))
    table = FitTable(columns, f"{len(rows)} models")
    for m in rows:
        active = "-" if m.active_params_b is None else f"{m.active_params_b:g}B"
        table.add_row(
            m.name,
            m.hub_id,
            f"{m.params_b:g}B",
            active,
            str(m.max_context),
            ", ".join(m.precisions),
            ", ".join(m.runtimes) or "-",
        )
    return table
