"""``xpupool serve | services | service show|stop|start|delete``: services, a job kept running as replicas
behind one endpoint (docs/services.md)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    emit,
    make_client,
    output_option,
    request_error,
)
from xpupool.client._render import ago, state_text
from xpupool.client._times import duration_s
from xpupool.client.cli_jobs import WAIT_POLL_S, _SubmitCommand, build_job
from xpupool.client.cli_models import intent, model_options
from xpupool.client.cli_service_tokens import token
from xpupool.model.errors import RequestError
from xpupool.model.job_text import env_pair

if TYPE_CHECKING:
    from xpupool.client import Client
    from xpupool.server.schemas.jobs import JobIn
    from xpupool.server.schemas.services import Service, ServiceIn


def replica_bounds(text: str | None) -> dict[str, int] | None:
    """``--replicas N`` or ``MIN..MAX``."""
    if text is None:
        return None
    low, dots, high = text.partition("..")
    if not low.isdigit() or (dots and not high.isdigit()):
        raise RequestError("--replicas", text, "use a count (2) or a range (1..4)")
    return {"min": int(low), "max": int(high)} if dots else {"min": int(low)}


def service_name(given: str | None, model: str | None, job: JobIn) -> str:
    """``--name``, else a name from the model, the image or the program."""
    if given:
        return given
    source = model or (job.image and re.split(r"[:@]", job.image.rsplit("/", 1)[-1])[0])
    source = source or (job.command[0].rsplit("/", 1)[-1] if job.command else "")
    name = re.sub(r"[^a-z0-9._-]+", "-", source.lower()).strip("-._")[:63].strip("-._")
    if not name:
        raise RequestError("--name", None, "name the service (--name NAME)")
    return name


def service_body(
    name: str,
    job: JobIn,
    port: int | None,
    replicas: str | None,
    ready_path: str | None,
    target_in_flight: float | None,
    window: str | None,
    tenant: str | None,
) -> ServiceIn:
    """The service body from the command's options (checked by the server's own schema)."""
    from pydantic import ValidationError

    from xpupool.server.schemas.services import ServiceIn

    body: dict[str, Any] = {"name": name, "job": job, "tenant": tenant, "port": port}
    bounds = replica_bounds(replicas)
    if bounds is not None:
        body["replicas"] = bounds
    if ready_path is not None:
        body["readiness"] = {"path": ready_path}
    scaling: dict[str, float] = {}
    if target_in_flight is not None:
        scaling["target_in_flight"] = target_in_flight
    if window is not None:
        seconds = duration_s(window)
        if seconds is None:
            raise RequestError("--window", window, "use a duration such as 60s or 5m")
        scaling["window_s"] = seconds
    if scaling:
        body["scaling"] = scaling
    try:
        return ServiceIn.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        raise request_error(exc) from None


def create_and_show(
    url: str | None,
    token: str | None,
    body: ServiceIn,
    output: str,
    wait_s: float | None = None,
) -> None:
    """Create the service and show it; with ``wait_s``, show it once it is ready (a service
    never finishes: ready is what a wait can mean), or fail naming ``--timeout`` after that
    long, the service left as it is."""
    with make_client(url, token) as client:
        found = client.create_service(body)
        if output == "table":
            click.echo(f"service {found.name} created: {found.url} ({found.state.value})")
        if wait_s is not None:
            found = wait_ready(client, found, wait_s)
    if output == "json" or wait_s is not None:
        emit(output, found, lambda: detail(found))


def wait_ready(client: Client, found: Service, timeout_s: float) -> Service:
    """Poll until the service is ready. Raises ``RequestError`` on timeout with its state and
    reason (a replica that keeps failing leaves it ``restarting``: the reason says why)."""
    from xpupool.server.schemas.services import ServiceState

    deadline = time.monotonic() + timeout_s
    while found.state is not ServiceState.READY:
        if time.monotonic() > deadline:
            raise RequestError(
                "--timeout",
                timeout_s,
                f"service {found.name} still {found.state.value}: {found.reason}",
            )
        time.sleep(WAIT_POLL_S)
        found = client.service(found.name, found.tenant)
    return found


@click.command(cls=_SubmitCommand, epilog=CONNECTION_HELP)
@click.option("--name", help="the service's name [default: from the model, image or program]")
@click.option("--image", help="container image [default: run on the host]")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="port the image listens on (vLLM's 8000) [default: $PORT, as a host process always]",
)
@click.option("--replicas", metavar="N|MIN..MAX", help="replicas, or a range to scale in [1]")
@click.option("--ready-path", help="readiness probe path [default: /health]")
@click.option("--target-in-flight", type=float, help="requests in flight per replica aimed at")
@click.option("--window", help="how long the load stays low before scaling down, e.g. 60s")
@click.option("--request", "request_text", help="what each replica needs, e.g. 'L20 mem=20Gi'")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="environment (repeat)")
@click.option("--queue", help="queue [default: the queue named after the tenant]")
@click.option("--tenant", help="admin only: the tenant the service belongs to")
@click.option("--model", "model", help="serve a catalog model: the server picks cards and image")
@model_options
@click.option("--model-path", help="with --model: weights path for the runtime [default: hub id]")
@click.option("--wait", is_flag=True, help="wait until the service is ready, then show it")
@click.option("--timeout", default=600.0, show_default=True, help="--wait limit, seconds")
@connection_options
@output_option
@click.pass_context
def serve(
    ctx: click.Context,
    name: str | None,
    image: str | None,
    port: int | None,
    replicas: str | None,
    ready_path: str | None,
    target_in_flight: float | None,
    window: str | None,
    request_text: str | None,
    env_pairs: tuple[str, ...],
    queue: str | None,
    tenant: str | None,
    model: str | None,
    task: str,
    precision: str | None,
    context: str | None,
    concurrency: int,
    method: str | None,
    model_path: str | None,
    wait: bool,
    timeout: float,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Run a service: replicas of a server kept ready behind /v1/services/NAME/proxy/.

    \b
    xpupool serve --image vllm/vllm-openai:v0.8.5 --port 8000 --replicas 1..3 -- --model M
    xpupool serve --model qwen2.5-7b --replicas 2
    xpupool serve --name hello --ready-path / -- sh -c 'exec python3 -m http.server $PORT'
    """
    if task != "serve":
        raise RequestError("--task", task, "a service serves: --task serve")
    overrides: dict[str, Any] = {"image": image, "queue": queue, "request": request_text}
    if model is not None:
        block = intent(model, task, precision, context, concurrency, method)
        overrides["model"] = block | ({"model_path": model_path} if model_path else {})
    env = dict(env_pair(p, "--env") for p in env_pairs)
    job = build_job((), ctx.meta.get("xpupool.argv"), None, overrides, env)
    body = service_body(
        service_name(name, model, job),
        job,
        port,
        replicas,
        ready_path,
        target_in_flight,
        window,
        tenant,
    )
    create_and_show(url, token, body, output, timeout if wait else None)


@click.command(epilog=CONNECTION_HELP)
@click.option("--tenant", help="admin only: that tenant's")
@connection_options
@output_option
def services(tenant: str | None, url: str | None, token: str | None, output: str) -> None:
    """Services: URL, ready/desired replicas, requests per second, p99 latency."""
    with make_client(url, token) as client:
        found = client.services(tenant)
    emit(output, found, lambda: services_table(found))


@click.group()
def service() -> None:
    """One service: show, stop, start, delete, its tokens (xpupool serve creates one)."""


service.add_command(token)


@service.command("show", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help="admin only: that tenant's")
@connection_options
@output_option
def service_show(
    name: str, tenant: str | None, url: str | None, token: str | None, output: str
) -> None:
    """Service NAME: its state, replicas and events."""
    with make_client(url, token) as client:
        found = client.service(name, tenant)
    emit(output, found, lambda: detail(found))


@service.command("stop", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help="admin only: that tenant's")
@connection_options
def service_stop(name: str, tenant: str | None, url: str | None, token: str | None) -> None:
    """Stop service NAME: its replicas drain and end, none starts until it is started again;
    its endpoint answers 503."""
    with make_client(url, token) as client:
        found = client.stop_service(name, tenant)
    click.echo(f"service {name} {found.state.value}: {found.reason}")


@service.command("start", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help="admin only: that tenant's")
@connection_options
def service_start(name: str, tenant: str | None, url: str | None, token: str | None) -> None:
    """Start stopped service NAME again: its minimum of replicas."""
    with make_client(url, token) as client:
        found = client.start_service(name, tenant)
    click.echo(f"service {name} {found.state.value}: {found.reason}")


@service.command("delete", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option("--tenant", help="admin only: that tenant's")
@connection_options
def service_delete(name: str, tenant: str | None, url: str | None, token: str | None) -> None:
    """Delete service NAME and stop its replicas."""
    with make_client(url, token) as client:
        client.delete_service(name, tenant)
    click.echo(f"service {name} deleted")


def _rate(s: Service) -> tuple[str, str]:
    p99 = "-" if s.p99_ms is None else f"{s.p99_ms:.1f} ms"
    return f"{s.requests_per_s:.1f}", p99


def services_table(found: list[Service]) -> Table:
    table = Table("NAME", "TENANT", "STATE", "URL", "READY", "REQ/S", "P99")
    for s in found:
        table.add_row(s.name, s.tenant, s.state.value, s.url, f"{s.ready}/{s.desired}", *_rate(s))
    return table


def detail(s: Service) -> Group:
    rate, p99 = _rate(s)
    head = Text(
        f"service {s.name} (tenant {s.tenant}): {s.state.value}: {s.reason}\n"
        f"url {s.url}  generation {s.generation}  ready {s.ready}/{s.desired} "
        f"(min {s.min}, max {s.max})  port {s.port or '$PORT'}  {rate} req/s  p99 {p99}"
    )
    replicas = Table("REPLICA", "JOB", "GEN", "STATE", "READY", "NODE", "ADDRESS")
    for r in s.replicas:
        where = f"{r.host}:{r.port}" if r.host and r.port else "-"
        ready = "draining" if r.draining else ("yes" if r.ready else "no")
        replicas.add_row(
            r.name, str(r.job_id), str(r.generation), r.state.value, ready, r.node or "-", where
        )
    events = Table("WHEN", "STATE", "REASON")
    for e in s.events[-20:]:
        events.add_row(ago(e.at), state_text(e.state), e.reason)
    return Group(head, replicas, events)
