"""``xpupool usage``: what tenants used, from ``GET /v1/usage``; ``xpupool usage export``: a
month's CSV for an accounting system (docs/usage.md). A tenant's token shows its own usage, the
admin's every tenant's."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime
from typing import Any

import click

from xpupool.client._cli_common import CONNECTION_HELP, connection_options, console, make_client
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


def _when(t: float, step: str) -> str:
    fmt = {"hour": "%Y-%m-%d %H:00", "day": "%Y-%m-%d", "month": "%Y-%m"}[step]
    return datetime.fromtimestamp(t, UTC).strftime(fmt)
