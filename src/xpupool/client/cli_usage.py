"""``xpupool usage``: what tenants used, from ``GET /v1/usage``; ``xpupool usage export``: a
month's CSV for an accounting system; ``xpupool usage prices`` and ``xpupool usage budget``: the
price table and a tenant's budget (docs/usage.md). A tenant's token shows its own usage and
budget, the admin's every tenant's; only the admin sets prices and budgets."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime
from typing import Any

import click

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    console,
    load_yaml,
    make_client,
)
from xpupool.client._times import since

COLUMNS = (
    ("device_seconds", "card-hours", 3600.0),
    ("gib_seconds", "GiB-hours", 3600.0),
    ("compute_unit_seconds", "compute-unit-hours", 3600.0),
    ("energy_j", "kWh", 3.6e6),
)
"""(the answer's field, the table's column, its divisor)."""


@click.group("usage", invoke_without_command=True, epilog=CONNECTION_HELP)
@click.option("--by", default="tenant", show_default=True, help="tenant,queue,site,model")
@click.option("--from", "start", help="a duration back from now (7d) or an ISO time; 30d back")
@click.option("--to", "end", help="a duration back from now or an ISO time; now")
@click.option(
    "--step", type=click.Choice(["hour", "day", "month"]), default="day", show_default=True
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
)
@connection_options
@click.pass_context
def usage(
    ctx: click.Context,
    by: str,
    start: str | None,
    end: str | None,
    step: str,
    output: str,
    url: str | None,
    token: str | None,
) -> None:
    """Card-hours, device-memory GiB-hours, normalised compute, energy and (once the admin set
    prices) cost per time step and per the --by labels."""
    if ctx.invoked_subcommand is not None:
        return
    now = time.time()
    frm = None if start is None else since("--from", start, now)
    to = None if end is None else since("--to", end, now)
    with make_client(url, token) as client:
        answer = client.usage(by=by, start=frm, end=to, step=step)
    labels: list[str] = list(answer["by"])
    rows: list[dict[str, Any]] = list(answer["rows"])
    if output == "json":
        import json

        click.echo(json.dumps(answer, indent=2))
        return
    priced = answer.get("currency") is not None  # a price table is set: each row's cost
    cost = ["cost" + (f" ({answer['currency']})" if answer.get("currency") else "")]
    header = ["start", *labels, *(title for _f, title, _d in COLUMNS), *(cost if priced else [])]
    lines = [
        [
            _when(float(r["start"]), step),
            *(str(r[name]) for name in labels),
            *(f"{float(r[field]) / div:.3f}" for field, _t, div in COLUMNS),
            *([f"{float(r['cost'] or 0):.2f}"] if priced else []),
        ]
        for r in rows
    ]
    if output == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(lines)
        click.echo(out.getvalue(), nl=False)
        return
    from rich.table import Table

    table = Table(*header, box=None)
    for line in lines:
        table.add_row(*line)
    console().print(table if lines else "no usage in that time")


@usage.command("export", epilog=CONNECTION_HELP)
@click.option("--month", required=True, help="YYYY-MM (UTC)")
@connection_options
def export(month: str, url: str | None, token: str | None) -> None:
    """The month's CSV: one row per tenant, queue, site and model, in hours and kWh."""
    with make_client(url, token) as client:
        click.echo(client.usage_export(month), nl=False)


@usage.group("prices", invoke_without_command=True, epilog=CONNECTION_HELP)
@click.option("--at", "at", help="the table in force at this time (Unix seconds or ISO; now)")
@click.option("--history", is_flag=True, help="every table with the time it takes effect")
@connection_options
@click.pass_context
def prices(
    ctx: click.Context, at: str | None, history: bool, url: str | None, token: str | None
) -> None:
    """The price table in force: per card-hour by model, per compute-unit-hour, per kWh."""
    if ctx.invoked_subcommand is not None:
        return
    if history and at is not None:
        raise click.BadParameter("give --at or --history, not both", param_hint="--history")
    with make_client(url, token) as client:
        tables = client.price_history() if history else [client.prices(at)]
    if history and not tables:
        click.echo("no price table is set")
        return
    click.echo("\n\n".join(_prices_text(t) for t in tables))


@prices.command("set", epilog=CONNECTION_HELP)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--at", "at", help="in force from this time on (Unix seconds or ISO; default now)")
@connection_options
def set_prices(file: str, at: str | None, url: str | None, token: str | None) -> None:
    """The price table from now (or --at) on, FILE's (YAML or JSON: currency,
    per_compute_unit_hour, per_kwh, models: [{model, per_card_hour}]); the admin's. Usage
    recorded before keeps the prices it was recorded at."""
    with make_client(url, token) as client:
        table = client.set_prices(load_yaml(file), at)
    click.echo(_prices_text(table))


def _prices_text(table: dict[str, Any]) -> str:
    currency = table.get("currency") or ""
    begins = table.get("effective_at")
    lines = [
        "in force from: "
        + ("-" if begins is None else datetime.fromtimestamp(float(begins), UTC).isoformat()),
        f"currency: {currency or '-'}",
        f"per compute-unit-hour: {float(table.get('per_compute_unit_hour') or 0):g}",
        f"per kWh: {float(table.get('per_kwh') or 0):g}",
    ]
    lines += [f"{m['model']}: {float(m['per_card_hour']):g} per card-hour" for m in table["models"]]
    return "\n".join(lines)


@usage.group("budget")
def budget() -> None:
    """A tenant's budget: show, set or delete it."""


@budget.command("show", epilog=CONNECTION_HELP)
@click.argument("tenant")
@connection_options
def show_budget(tenant: str, url: str | None, token: str | None) -> None:
    """TENANT's budget: its period, amount and policy, and what it spent in this period."""
    with make_client(url, token) as client:
        _print_budget(client.budget(tenant))


@budget.command("set", epilog=CONNECTION_HELP)
@click.argument("tenant")
@click.option(
    "--period", type=click.Choice(["day", "week", "month"]), required=True, help="UTC period"
)
@click.option("--amount", type=float, required=True, help="most it may spend per period")
@click.option(
    "--policy",
    type=click.Choice(["warn", "lower-priority", "refuse"]),
    required=True,
    help="what happens to new jobs once spend reaches the amount",
)
@click.option("--lowered-priority", type=int, help="with lower-priority: the priority at most")
@connection_options
def set_budget(
    tenant: str,
    period: str,
    amount: float,
    policy: str,
    lowered_priority: int | None,
    url: str | None,
    token: str | None,
) -> None:
    """Set TENANT's budget (the admin's)."""
    body: dict[str, Any] = {"period": period, "amount": amount, "policy": policy}
    if lowered_priority is not None:
        body["lowered_priority"] = lowered_priority
    with make_client(url, token) as client:
        _print_budget(client.set_budget(tenant, body))


@budget.command("delete", epilog=CONNECTION_HELP)
@click.argument("tenant")
@connection_options
def delete_budget(tenant: str, url: str | None, token: str | None) -> None:
    """Remove TENANT's budget (the admin's): its jobs are admitted whatever it spends."""
    with make_client(url, token) as client:
        client.delete_budget(tenant)
    click.echo(f"budget of {tenant} removed")


def _print_budget(b: dict[str, Any]) -> None:
    unit = f" {b['currency']}" if b.get("currency") else ""
    state = "exceeded: the policy applies" if b.get("exceeded") else "within"
    ends = datetime.fromtimestamp(float(b["period_end"]), UTC).strftime("%Y-%m-%d %H:%M UTC")
    click.echo(
        f"{b['tenant']}: {float(b['spent']):.2f} of {float(b['amount']):g}{unit} per {b['period']}"
        f" ({state}); policy {b['policy']}; the period ends {ends}"
    )


def _when(t: float, step: str) -> str:
    fmt = {"hour": "%Y-%m-%d %H:00", "day": "%Y-%m-%d", "month": "%Y-%m"}[step]
    return datetime.fromtimestamp(t, UTC).strftime(fmt)
