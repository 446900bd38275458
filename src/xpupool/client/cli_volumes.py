"""``xpupool volume``: directories on the nodes the admin lets tenants mount in their jobs."""

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
from xpupool.model.quantity import format_mib, parse_memory_mib


@click.group()
def volume() -> None:
    """Volumes: declare (admin), list, delete; jobs mount them with submit --volume."""


@volume.command("create", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--path", required=True, help="absolute directory on the nodes ('{node}': its name)")
@click.option("--per-tenant", is_flag=True, help="each tenant gets PATH/<tenant>, its own")
@click.option("--read-only", is_flag=True, help="jobs mount it read-only")
@click.option("--tenant", "tenants", multiple=True, help="a tenant that may mount it (repeat)")
@click.option("--queue", "queues", multiple=True, help="a queue whose jobs may mount it (repeat)")
@click.option(
    "--quota",
    metavar="SIZE",
    help="what a tenant's directory (--per-tenant) or the volume may hold, e.g. 500Gi: "
    "reported when over, not enforced",
)
@connection_options
@output_option
def volume_create(
    name: str,
    path: str,
    per_tenant: bool,
    read_only: bool,
    tenants: tuple[str, ...],
    queues: tuple[str, ...],
    quota: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Admin: declare (or replace) volume NAME.

    \b
    xpupool volume create datasets --path /srv/datasets --read-only
    xpupool volume create scratch --path /srv/scratch --per-tenant --tenant lab
    """
    body = {
        "path": path,
        "per_tenant": per_tenant,
        "read_only": read_only,
        "tenants": list(tenants) or None,
        "queues": list(queues) or None,
        "quota_bytes": None if quota is None else parse_memory_mib("--quota", quota) << 20,
    }
    with make_client(url, token) as client:
        found = client.put_volume(name, body)
    emit(output, found, lambda: _table([found]))


@volume.command("list", epilog=CONNECTION_HELP)
@connection_options
@output_option
def volume_list(url: str | None, token: str | None, output: str) -> None:
    """Volumes (a tenant sees those it may mount)."""
    with make_client(url, token) as client:
        found = client.volumes()
    emit(output, found, lambda: _table(found))


@volume.command("delete", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
def volume_delete(name: str, url: str | None, token: str | None) -> None:
    """Admin: delete volume NAME's declaration (its directory stays on the nodes)."""
    with make_client(url, token) as client:
        client.delete_volume(name)
    click.echo(f"volume {name} deleted")


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table("NAME", "PATH", "PER TENANT", "MODE", "TENANTS", "QUEUES", "USED", "QUOTA")
    for r in rows:
        used, quota = r.get("used_bytes"), r.get("quota_bytes")
        over = r.get("over_quota") or []
        table.add_row(
            str(r["name"]),
            str(r["path"]),
            "yes" if r["per_tenant"] else "no",
            "ro" if r["read_only"] else "rw",
            ", ".join(r["tenants"]) if r["tenants"] else "all",
            ", ".join(r["queues"]) if r["queues"] else "all",
            "-" if used is None else format_mib(int(used) >> 20),
            ("-" if quota is None else format_mib(int(quota) >> 20))
            + (f" (over: {', '.join(over)})" if over else ""),
        )
    return table
