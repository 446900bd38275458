"""``xpupool secret``: a tenant's secrets, written once and never shown again."""

from __future__ import annotations

import sys
from pathlib import Path
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
from xpupool.client._render import ago

TENANT_HELP = (
    "admin: the tenant whose secrets these are (none: the admin's own, such as a site's kubeconfig)"
)


@click.group()
def secret() -> None:
    """A tenant's secrets (registry logins, hub tokens, keys): set, list, delete."""


@secret.command("set", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option(
    "--from-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="the value is this file's bytes (else standard input, so it stays out of the shell's "
    "history and the process list)",
)
@click.option("--tenant", help=TENANT_HELP)
@connection_options
@output_option
def secret_set(
    name: str,
    from_file: Path | None,
    tenant: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Create or replace secret NAME; the value is sealed at once and never shown again.

    \b
    xpupool secret set hf-token < ~/.hf-token
    xpupool secret set registry-login --from-file auth.json
    """
    if from_file is not None:
        value = from_file.read_bytes()
    else:
        if sys.stdin.isatty():
            click.echo("value (end with Ctrl-D):", err=True)
        value = sys.stdin.buffer.read()
    with make_client(url, token) as client:
        found = client.set_secret(name, value, tenant=tenant)
    emit(output, found, lambda: _table([found]))


@secret.command("list", epilog=CONNECTION_HELP)
@click.option("--tenant", help=TENANT_HELP)
@connection_options
@output_option
def secret_list(tenant: str | None, url: str | None, token: str | None, output: str) -> None:
    """List secrets by name and size (never their values)."""
    with make_client(url, token) as client:
        found = client.secrets(tenant=tenant)
    emit(output, found, lambda: _table(found))


@secret.command("delete", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help=TENANT_HELP)
@connection_options
def secret_delete(name: str, tenant: str | None, url: str | None, token: str | None) -> None:
    """Delete secret NAME (jobs already given it keep what they were given)."""
    with make_client(url, token) as client:
        client.delete_secret(name, tenant=tenant)
    click.echo(f"secret {name} deleted")


@secret.command("rotate-key", epilog=CONNECTION_HELP)
@connection_options
@output_option
def secret_rotate_key(url: str | None, token: str | None, output: str) -> None:
    """Admin: seal every secret again under a new key, which then replaces the key file."""
    with make_client(url, token) as client:
        found = client.rotate_secret_key()
    emit(output, found, lambda: f"{found['resealed']} secret(s) sealed under key {found['key_id']}")


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table("NAME", "BYTES", "UPDATED")
    for r in rows:
        table.add_row(str(r["name"]), str(r["size"]), ago(float(r["updated_at"])))
    return table
