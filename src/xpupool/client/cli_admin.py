"""``xpupool tenant | token | queue``: the admin's commands (an admin token is needed)."""

from __future__ import annotations

from typing import Any

import click
from pydantic import ValidationError

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    emit,
    load_yaml,
    make_client,
    output_option,
    request_error,
)
from xpupool.client._render import queues_table, tenants_table, tokens_table
from xpupool.model.errors import RequestError
from xpupool.server import schemas as s


@click.group()
def tenant() -> None:
    """Admin: create and list tenants."""


@tenant.command("create", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--weight", type=float, default=1.0, show_default=True, help="fair-share weight")
@connection_options
@output_option
def tenant_create(
    name: str, weight: float, url: str | None, token: str | None, output: str
) -> None:
    """Create a tenant and its default queue (same name, no quota)."""
    try:
        body = s.TenantIn(name=name, weight=weight)
    except ValidationError as exc:
        raise request_error(exc) from None
    with make_client(url, token) as client:
        found = client.create_tenant(body)
    if output == "json":
        emit(output, found, lambda: tenants_table([found]))
    else:
        click.echo(f"tenant {found.name} created (weight {found.weight:g}), queue {found.name}")


@tenant.command("list", epilog=CONNECTION_HELP)
@connection_options
@output_option
def tenant_list(url: str | None, token: str | None, output: str) -> None:
    """List tenants."""
    with make_client(url, token) as client:
        found = client.tenants()
    emit(output, found, lambda: tenants_table(found))


@click.group()
def token() -> None:
    """Admin: issue, list and revoke tokens."""


@token.command("issue", epilog=CONNECTION_HELP)
@click.argument("tenant_name", metavar="TENANT")
@click.option("--role", type=click.Choice(["tenant", "agent"]), default="tenant", show_default=True)
@click.option("--name", "label", default="", help="a label for the token")
@connection_options
@output_option
def token_issue(
    tenant_name: str, role: str, label: str, url: str | None, token: str | None, output: str
) -> None:
    """Issue a token; the secret is printed once and never again."""
    try:
        body = s.TokenIn(name=label, role=role)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise request_error(exc) from None
    with make_client(url, token) as client:
        found = client.issue_token(tenant_name, body)
    if output == "json":
        emit(output, found, lambda: tokens_table([found]))
    else:
        click.echo(f"token {found.id} for {found.tenant or '-'} ({found.role}); keep it secret:")
        click.echo(found.token or "")


@token.command("list", epilog=CONNECTION_HELP)
@connection_options
@output_option
def token_list(url: str | None, token: str | None, output: str) -> None:
    """List tokens (never their secrets)."""
    with make_client(url, token) as client:
        found = client.tokens()
    emit(output, found, lambda: tokens_table(found))


@token.command("revoke", epilog=CONNECTION_HELP)
@click.argument("token_id", type=click.IntRange(1))
@connection_options
def token_revoke(token_id: int, url: str | None, token: str | None) -> None:
    """Revoke a token by id (see `xpupool token list`)."""
    with make_client(url, token) as client:
        client.revoke_token(token_id)
    click.echo(f"token {token_id} revoked")


@click.group()
def queue() -> None:
    """Admin: create or replace a queue and its quotas; show one queue."""


def _quota(text: str) -> dict[str, Any]:
    """'FLAVOR:RESOURCE=NOMINAL[+BORROW]', e.g. 'A100:devices=4+2' or '*:device_memory_mib=81920'."""
    head, sep, amounts = text.partition("=")
    flavor, colon, resource = head.rpartition(":")
    if not sep or not colon:
        raise RequestError(
            "--quota", text, "use FLAVOR:RESOURCE=NOMINAL[+BORROW], e.g. A100:devices=4"
        )
    nominal, plus, borrow = amounts.partition("+")
    try:
        return {
            "flavor": flavor,
            "resource": resource,
            "nominal": int(nominal),
            "borrowing_limit": int(borrow) if plus else None,
        }
    except ValueError:
        raise RequestError("--quota", text, "amounts must be whole numbers") from None


def build_queue(
    file: str | None,
    name: str | None,
    tenant_name: str | None,
    cohort: str | None,
    quotas: tuple[str, ...],
) -> s.QueueIn:
    """The queue body: the ``-f`` file (a QueueIn as YAML), then flags on top (``--quota``
    replaces the file's quotas). Raises ``RequestError`` naming the file and the field."""
    body: dict[str, Any] = load_yaml(file) if file else {}
    for key, value in (("name", name), ("tenant", tenant_name), ("cohort", cohort)):
        if value is not None:
            body[key] = value
    if quotas:
        body["quotas"] = [_quota(q) for q in quotas]
    try:
        return s.QueueIn.model_validate(body)
    except ValidationError as exc:
        raise request_error(exc, file or "") from None


@queue.command("put", epilog=CONNECTION_HELP)
@click.option("-f", "--file", type=click.Path(dir_okay=False), help="queue as YAML (a QueueIn)")
@click.option("--name", help="queue name")
@click.option("--tenant", "tenant_name", help="owning tenant")
@click.option("--cohort", help="cohort that lends and borrows unused quota")
@click.option(
    "--quota",
    "quotas",
    multiple=True,
    metavar="FLAVOR:RESOURCE=N[+B]",
    help="repeat; RESOURCE is devices, device_memory_mib or cores_permille; +B may borrow B",
)
@connection_options
@output_option
def queue_put(
    file: str | None,
    name: str | None,
    tenant_name: str | None,
    cohort: str | None,
    quotas: tuple[str, ...],
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Create or replace a queue.

    \b
    xpupool queue put -f queue.yaml
    xpupool queue put --name research --tenant lab --quota A100:devices=4 --quota '*:devices=8'
    """
    body = build_queue(file, name, tenant_name, cohort, quotas)
    with make_client(url, token) as client:
        found = client.put_queue(body)
    emit(output, found, lambda: queues_table([found]))


@queue.command("show", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
@output_option
def queue_show(name: str, url: str | None, token: str | None, output: str) -> None:
    """One queue with its quota use."""
    with make_client(url, token) as client:
        found = client.queue(name)
    emit(output, found, lambda: queues_table([found]))
