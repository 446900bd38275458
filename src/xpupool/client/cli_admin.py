"""``xpupool tenant | token | queue``: the admin's commands (an admin token is needed)."""

from __future__ import annotations

import time
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
from xpupool.client._render import audit_table, queues_table, tenants_table, tokens_table, until
from xpupool.client._times import expiry, since
from xpupool.model.errors import RequestError
from xpupool.server.schemas.audit import AuditKind
from xpupool.server.schemas.queues import QueueIn, QueuePreemption, UnlistedFlavors
from xpupool.server.schemas.tenants import TenantIn, TenantPatch, TokenIn


@click.group()
def tenant() -> None:
    """Admin: create, change and list tenants."""


def limit_options(func: Any) -> Any:
    """--max-pending-jobs, --max-replicas-per-job, --max-pending-replicas, --max-job-log-mib,
    --max-log-mib (unset: left as is, or the server's default for a new tenant)."""
    for name, what in reversed(
        (
            ("max_pending_jobs", "most jobs it may have pending (over: 429)"),
            ("max_replicas_per_job", "most replicas one job may ask for (over: 403)"),
            ("max_pending_replicas", "most replicas over its pending jobs (over: 429)"),
            ("max_job_log_mib", "most MiB of log the server keeps of one job (then cut)"),
            ("max_log_mib", "most MiB of job logs the server keeps for it in all (then cut)"),
        )
    ):
        flag = "--" + name.replace("_", "-")
        func = click.option(flag, name, type=int, metavar="N", help=what)(func)
    return func


@tenant.command("create", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--weight", type=float, default=1.0, show_default=True, help="fair-share weight")
@limit_options
@connection_options
@output_option
def tenant_create(
    name: str, weight: float, url: str | None, token: str | None, output: str, **limits: int | None
) -> None:
    """Create a tenant and its default queue (same name, no quota)."""
    given = {k: v for k, v in limits.items() if v is not None}
    try:
        body = TenantIn(name=name, weight=weight, **given)
    except ValidationError as exc:
        raise request_error(exc) from None
    with make_client(url, token) as client:
        found = client.create_tenant(body)
    if output == "json":
        emit(output, found, lambda: tenants_table([found]))
    else:
        click.echo(f"tenant {found.name} created (weight {found.weight:g}), queue {found.name}")


@tenant.command("set", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--weight", type=float, help="fair-share weight")
@limit_options
@connection_options
@output_option
def tenant_set(
    name: str,
    weight: float | None,
    url: str | None,
    token: str | None,
    output: str,
    **limits: int | None,
) -> None:
    """Change a tenant's weight or limits; what is not given stays.

    \b
    xpupool tenant set lab --max-pending-jobs 200 --max-replicas-per-job 64
    """
    given: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
    if weight is not None:
        given["weight"] = weight
    try:
        patch = TenantPatch(**given)
    except ValidationError as exc:
        raise request_error(exc) from None
    with make_client(url, token) as client:
        found = client.update_tenant(name, patch)
    emit(output, found, lambda: tenants_table([found]))


@tenant.command("list", epilog=CONNECTION_HELP)
@connection_options
@output_option
def tenant_list(url: str | None, token: str | None, output: str) -> None:
    """List tenants with their limits and queued work (used/limit)."""
    with make_client(url, token) as client:
        found = client.tenants()
    emit(output, found, lambda: tenants_table(found))


@click.group()
def token() -> None:
    """Admin: issue, list and revoke tokens."""


@token.command("issue", epilog=CONNECTION_HELP)
@click.argument("tenant_name", metavar="[TENANT]", required=False)
@click.option(
    "--role",
    type=click.Choice(["tenant", "agent", "metrics"]),
    help="tenant: acts for TENANT (the default with TENANT); agent: as --agent; metrics: as "
    "--metrics",
)
@click.option("--agent", "as_agent", is_flag=True, help="an agent token (no TENANT needed)")
@click.option(
    "--metrics",
    "as_metrics",
    is_flag=True,
    help="a token that only reads /metrics, for Prometheus (no TENANT)",
)
@click.option("--node", help="agent: the one node the token speaks for")
@click.option(
    "--bootstrap",
    is_flag=True,
    help="agent: one-time token that registers one new node and is exchanged for its own token",
)
@click.option("--expires", help="a duration (30m, 12h, 7d) or an ISO time; default: never")
@click.option("--name", "label", default="", help="a label for the token")
@connection_options
@output_option
def token_issue(
    tenant_name: str | None,
    role: str | None,
    as_agent: bool,
    as_metrics: bool,
    node: str | None,
    bootstrap: bool,
    expires: str | None,
    label: str,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Issue a token; the secret is printed once and never again.

    \b
    xpupool token issue lab                          # a tenant token for lab
    xpupool token issue --agent --node gpu-7         # speaks for node gpu-7 only
    xpupool token issue --agent --bootstrap --expires 1h   # registers one new node, once
    xpupool token issue --metrics                    # Prometheus reads /metrics with it
    """
    agent_asked = as_agent or bootstrap or node is not None
    if role == "tenant" and agent_asked:
        raise click.UsageError("--role tenant cannot go with --agent, --node or --bootstrap")
    if (as_metrics or role == "metrics") and (agent_asked or tenant_name or role == "tenant"):
        raise click.UsageError("a metrics token has no TENANT, --agent, --node or --bootstrap")
    role = "agent" if agent_asked else ("metrics" if as_metrics else (role or "tenant"))
    if role == "tenant" and not tenant_name:
        raise click.UsageError("give TENANT for a tenant token, or --agent for an agent token")
    fields: dict[str, Any] = {"name": label, "role": role, "bootstrap": bootstrap, "node": node}
    if expires is not None:
        fields.update(expiry("--expires", expires))
    try:
        body = TokenIn.model_validate(fields)
    except ValidationError as exc:
        raise request_error(exc) from None
    with make_client(url, token) as client:
        found = (
            client.issue_token(tenant_name, body) if tenant_name else client.issue_agent_token(body)
        )
    if output == "json":
        emit(output, found, lambda: tokens_table([found]))
        return
    if found.role == "bootstrap":
        what = "bootstrap token: registers one new node"
    elif found.role == "agent":
        what = f"agent token for node {found.node}" if found.node else "agent token"
        what += "" if found.node else " (bound to the first node that uses it)"
    elif found.role == "metrics":
        what = "metrics token: reads /metrics only"
    else:
        what = f"tenant token for {found.tenant}"
    if found.expires_at is not None:
        what += f", expires {until(found.expires_at)}"
    if found.role == "tenant":  # the line to paste, as the README shows it
        click.echo(f"token {found.id}, {what}; keep it secret. To act as {found.tenant}:")
        click.echo(f"export XPUPOOL_TOKEN={found.token or ''}")
        return
    click.echo(f"token {found.id}, {what}; keep it secret:")
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
    max_priority: int | None = None,
    preemption: str | None = None,
    unlisted_flavors: str | None = None,
) -> QueueIn:
    """The queue body: the ``-f`` file (a QueueIn as YAML), then flags on top (``--quota``
    replaces the file's quotas). Raises ``RequestError`` naming the file and the field."""
    body: dict[str, Any] = load_yaml(file) if file else {}
    flags = (("name", name), ("tenant", tenant_name), ("cohort", cohort))
    policies = (("preemption", preemption), ("unlisted_flavors", unlisted_flavors))
    for key, value in (*flags, ("max_priority", max_priority), *policies):
        if value is not None:
            body[key] = value
    if quotas:
        body["quotas"] = [_quota(q) for q in quotas]
    try:
        return QueueIn.model_validate(body)
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
@click.option(
    "--max-priority",
    type=int,
    metavar="N",
    help="highest priority its jobs may ask for (above: 403) [default: 0, or the file's]",
)
@click.option(
    "--preemption",
    type=click.Choice([p.value for p in QueuePreemption]),
    help="may its jobs stop lower-priority ones for room [default: lower_priority]",
)
@click.option(
    "--unlisted-flavors",
    type=click.Choice([u.value for u in UnlistedFlavors]),
    help="devices no --quota names: usable without quota, or not at all [default: allow]",
)
@click.option(
    "--network",
    type=click.Choice(["bridge", "host"]),
    help="its jobs' image replicas' network, where the node allows it (agent --allow-network) "
    "[default: the node's]",
)
@connection_options
@output_option
def queue_put(
    file: str | None,
    name: str | None,
    tenant_name: str | None,
    cohort: str | None,
    quotas: tuple[str, ...],
    max_priority: int | None,
    preemption: str | None,
    unlisted_flavors: str | None,
    network: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Create or replace a queue (what is not given takes its default, max-priority 0 too).

    \b
    xpupool queue put -f queue.yaml
    xpupool queue put --name research --tenant lab --quota A100:devices=4 --quota '*:devices=8'
    xpupool queue put --name urgent --tenant lab --max-priority 100
    """
    body = build_queue(
        file, name, tenant_name, cohort, quotas, max_priority, preemption, unlisted_flavors
    )
    if network is not None:
        body = body.model_copy(update={"network": network})
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


@click.command("audit", epilog=CONNECTION_HELP)
@click.option("--since", "since_text", help="a duration back from now (1h, 7d) or an ISO time")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--kind",
    type=click.Choice([k.value for k in AuditKind]),
    help="admin actions, agents' registrations, or agents' refused requests only",
)
@connection_options
@output_option
def audit(
    since_text: str | None,
    limit: int,
    kind: str | None,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Admin: who did what to the pool (admin actions, agent registrations, refused agent
    requests, each credential's counted together a minute at a time), the newest LIMIT
    entries, oldest first."""
    start = None if since_text is None else since("--since", since_text, time.time())
    with make_client(url, token) as client:
        found = client.audit(since=start, limit=limit, kind=kind)
    emit(output, found, lambda: audit_table(found))
