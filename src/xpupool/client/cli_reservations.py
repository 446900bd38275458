"""``xpupool reservation``: cards held for a tenant in a time window, lent until it begins."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    emit,
    make_client,
    output_option,
)
from xpupool.client._times import ahead


@click.group()
def reservation() -> None:
    """Reservations: create and delete (admin), list; jobs run in one with reservation=NAME."""


@reservation.command("create", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", required=True, help="the tenant whose jobs may run in it")
@click.option("--job", help="only the tenant's job of this name may run in it")
@click.option("--cards", required=True, help="MODELxCOUNT whole cards on one node, e.g. A100x4")
@click.option("--site", help="the site its cards are in (default: any)")
@click.option("--from", "start", required=True, metavar="TIME", help="when its window begins")
@click.option("--to", "end", required=True, metavar="TIME", help="when its window ends")
@connection_options
@output_option
def reservation_create(
    name: str,
    tenant: str,
    job: str | None,
    cards: str,
    site: str | None,
    start: str,
    end: str,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Admin: hold cards for TENANT from --from to --to (an ISO time, or a duration from now).

    \b
    xpupool reservation create run --tenant lab --cards A100x4 --from 2026-12-01T08:00Z --to 2026-12-01T20:00Z
    xpupool reservation create soon --tenant lab --cards 2 --from 10m --to 2h
    """
    now = time.time()
    body = {
        "name": name,
        "tenant": tenant,
        "job": job,
        "cards": cards,
        "site": site,
        "start_at": ahead("--from", start, now),
        "end_at": ahead("--to", end, now),
    }
    with make_client(url, token) as client:
        found = client.create_reservation(body)
    emit(output, found, lambda: _table([found]))


@reservation.command("list", epilog=CONNECTION_HELP)
@connection_options
@output_option
def reservation_list(url: str | None, token: str | None, output: str) -> None:
    """Reservations (a tenant sees its own)."""
    with make_client(url, token) as client:
        found = client.reservations()
    emit(output, found, lambda: _table(found))


@reservation.command("delete", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
def reservation_delete(name: str, url: str | None, token: str | None) -> None:
    """Admin: release reservation NAME's cards; jobs waiting for it are refused."""
    with make_client(url, token) as client:
        client.delete_reservation(name)
    click.echo(f"reservation {name} deleted")


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table("NAME", "TENANT", "JOB", "CARDS", "SITE", "FROM", "TO", "PHASE", "DEVICES")
    for r in rows:
        table.add_row(
            str(r["name"]),
            str(r["tenant"]),
            r.get("job") or "any",
            str(r["cards"]),
            r.get("site") or "any",
            _when(float(r["start_at"])),
            _when(float(r["end_at"])),
            str(r["phase"]),
            ", ".join(r.get("devices") or ()),
        )
    return table
