"""``xpupool service token``: tokens that call one service's proxy and nothing else, for whoever
uses the service (a web app, a colleague) without the tenant's own token."""

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
from xpupool.client._render import ago

TENANT_HELP = "admin: the tenant whose service this is"


@click.group()
def token() -> None:
    """Tokens that reach one service's proxy only: create, list, revoke."""


@token.command("create", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--name", "label", help="your label for it (who holds it)")
@click.option("--tenant", help=TENANT_HELP)
@connection_options
@output_option
def token_create(
    name: str,
    label: str | None,
    tenant: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Issue a token for service NAME; the secret is printed once and never again.

    \b
    xpupool service token create chat --name webapp
    curl -H "Authorization: Bearer $TOKEN" $XPUPOOL_URL/v1/services/chat/proxy/v1/models
    """
    with make_client(url, token) as client:
        found = client.issue_service_token(name, label, tenant=tenant)
    emit(
        output,
        found,
        lambda: f"service token {found['id']} for {name}; keep it secret:\n{found['token']}",
    )


@token.command("list", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help=TENANT_HELP)
@connection_options
@output_option
def token_list(
    name: str, tenant: str | None, url: str | None, token: str | None, output: str
) -> None:
    """List service NAME's tokens (never their secrets)."""
    with make_client(url, token) as client:
        found = client.service_tokens(name, tenant=tenant)
    emit(output, found, lambda: _table(found))


@token.command("revoke", epilog=CONNECTION_HELP)
@click.argument("name")
@click.argument("token_id", type=int)
@click.option("--tenant", help=TENANT_HELP)
@connection_options
def token_revoke(
    name: str, token_id: int, tenant: str | None, url: str | None, token: str | None
) -> None:
    """Revoke token TOKEN_ID of service NAME: its next request is refused."""
    with make_client(url, token) as client:
        client.revoke_service_token(name, token_id, tenant=tenant)
    click.echo(f"service token {token_id} of {name} revoked")


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table("ID", "NAME", "CREATED", "REVOKED")
    for r in rows:
        table.add_row(
            str(r["id"]), str(r.get("name") or ""), ago(float(r["created_at"])), str(r["revoked"])
        )
    return table
