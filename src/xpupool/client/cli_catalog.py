"""``xpupool accelerators``: the accelerator models a request may name, and what the pool has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

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
from xpupool.server.schemas.devices import Accelerator


@click.command(epilog=CONNECTION_HELP)
@click.option(
    "--catalog-only",
    is_flag=True,
    help="list the catalog shipped with this xpupool, without asking a server (no pool counts)",
)
@click.option("--in-pool", is_flag=True, help="only the models the pool has")
@click.option("--vendor", help="only this vendor (a key or alias: nvidia, ascend, ...)")
@connection_options
@output_option
def accelerators(
    catalog_only: bool,
    in_pool: bool,
    vendor: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """List accelerator models (the names a request's device part may use): vendor, model, family,
    memory per card, aliases, and how many devices of each the pool has."""
    from xpupool.model.vendor import vendor_key

    if catalog_only:
        if in_pool:
            raise click.UsageError("--in-pool needs the server; leave out --catalog-only")
        from xpupool.catalog import list_accelerators, load_accelerators

        rows = [
            Accelerator.model_validate(asdict(r)) for r in list_accelerators(load_accelerators())
        ]
    else:
        try:
            with make_client(url, token) as client:
                rows = client.accelerators()
        except Unreachable as exc:  # the catalog alone is still worth reading
            raise click.ClickException(
                f"{exc}; 'xpupool accelerators --catalog-only' lists the catalog without a server"
            ) from None
    if vendor is not None:
        key = vendor_key(vendor, "--vendor")
        rows = [r for r in rows if r.vendor == key]
    if in_pool:
        rows = [r for r in rows if r.in_pool]
    emit(output, rows, lambda: accelerators_table(rows))


def accelerators_table(rows: Sequence[Accelerator]) -> FitTable:
    """One line per model; a model the catalog lacks says so in the family column. Fits the
    terminal as every table does: aliases wrap, and go first when the width is short."""
    counted = any(r.in_pool is not None for r in rows)
    names = ["vendor", "model", "family", "memory", *(["in pool"] if counted else []), "aliases"]
    columns = _columns(*names, text=("aliases", "family"), spare=("aliases",))
    table = FitTable(columns, f"{len(rows)} accelerator models")
    for r in rows:
        memory = "" if r.memory_gib is None else f"{r.memory_gib:g}GB"
        family = r.family if r.in_catalog and r.family else "(not in catalog)"
        pool = [str(r.in_pool) if r.in_pool else "-"] if counted else []
        table.add_row(r.vendor, r.model, family, memory, *pool, ", ".join(r.aliases))
    return table
