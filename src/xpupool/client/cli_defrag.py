"""``xpupool defrag --dry-run``: what online defragmentation would move now, and what it would
free (``GET /v1/defrag/plan``; docs/defragmentation.md)."""

from __future__ import annotations

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


@click.command(epilog=CONNECTION_HELP)
@click.option("--dry-run", is_flag=True, help="show the plan; change nothing (needed)")
@connection_options
@output_option
def defrag(dry_run: bool, url: str | None, token: str | None, output: str) -> None:
    """Admin: the running jobs defragmentation would move for each pending job, and the cards
    that would then hold it. The server moves work itself when started with ``xpupool up
    --defrag``; this only shows the plan.

    \b
    xpupool defrag --dry-run
    xpupool defrag --dry-run -o json
    """
    if not dry_run:
        raise click.UsageError(
            "give --dry-run: the server moves work itself when started with --defrag"
        )
    with make_client(url, token) as client:
        found = client.defrag_plan()
    emit(output, found, lambda: _table(found))


def _cards(held: list[dict[str, Any]]) -> str:
    return "; ".join(f"{c['node']}: {', '.join(c['cards'])}" for c in held)


def _table(found: dict[str, Any]) -> Table:
    state = "on" if found.get("enabled") else "off (plans with the default budget)"
    table = Table(
        "FOR JOB",
        "TENANT",
        "MOVES JOB",
        "OF TENANT",
        "FROM",
        "GPU-H LOST",
        "FREES",
        title=f"defragmentation: {state}",
    )
    for plan in found.get("plans") or ():
        first = True
        for move in plan["moves"]:
            table.add_row(
                str(plan["job"]) if first else "",
                str(plan["tenant"]) if first else "",
                str(move["job"]),
                str(move["tenant"]),
                _cards(move["holds"]),
                f"{float(move['gpu_hours_lost']):.2f}",
                _cards(plan["frees"]) if first else "",
            )
            first = False
    return table
