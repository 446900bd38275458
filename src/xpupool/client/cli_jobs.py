"""``xpupool submit | jobs | job | logs | cancel``: a tenant's day-to-day commands."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    emit,
    load_yaml,
    make_client,
    output_option,
    request_error,
)
from xpupool.client._http import Client
from xpupool.client._render import job_detail, jobs_table
from xpupool.client._times import duration_s
from xpupool.client._views import FINAL_JOB_STATES, JOB_STATES, JobView
from xpupool.client.cli_models import intent, model_options, plan_table
from xpupool.client.log_follow import skipped_note
from xpupool.model.errors import RequestError
from xpupool.model.job_text import env_pair, retry_causes

if TYPE_CHECKING:  # what a submission is checked with, imported by submit alone
    from xpupool.server.schemas.jobs import JobIn

WAIT_POLL_S = 0.5


class _SubmitCommand(click.Command):
    """Everything after ``--`` is the job's argv, kept apart before click parses (so a program's
    own ``-o`` or ``--name`` never reaches our options)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["xpupool.argv"] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


def _seconds(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    seconds = duration_s(text)
    if seconds is None or seconds <= 0:
        raise RequestError(option, text, "use a duration such as 90s, 30m or 2h")
    return seconds


def build_job(
    spec_words: tuple[str, ...],
    argv: list[str] | None,
    file: str | None,
    overrides: dict[str, Any],
    env: dict[str, str],
) -> JobIn:
    """The job body: the ``-f`` file (a JobIn as YAML) if any, then the spec, argv and flags on top.

    Raises ``RequestError`` naming the file and field on a typo (request bodies are strict)."""
    body: dict[str, Any] = load_yaml(file) if file else {}
    if spec_words:
        body["spec"] = " ".join(spec_words)
        body.pop("request", None)
    if argv:
        body["command"] = argv
    if env:
        body["env"] = {**(body.get("env") or {}), **env}
    body.update({k: v for k, v in overrides.items() if v is not None})
    from pydantic import ValidationError

    from xpupool.server.schemas.jobs import JobIn

    try:
        return JobIn.model_validate(body)
    except ValidationError as exc:
        raise request_error(exc, file or "") from None


def _volume_mount(text: str) -> dict[str, Any]:
    """``NAME:PATH`` or ``NAME:PATH:ro`` of ``--volume``."""
    name, _, rest = text.partition(":")
    path, ro = rest, False
    if rest.endswith(":ro"):
        path, ro = rest[: -len(":ro")], True
    if not name or not path:
        raise RequestError("--volume", text, "use NAME:/mount/path or NAME:/mount/path:ro")
    return {"name": name, "path": path, "read_only": ro}


def _secret_ref(text: str) -> dict[str, str]:
    """``NAME`` or ``NAME:VAR`` of ``--secret``."""
    name, _, var = text.partition(":")
    return {"name": name, "env": var} if var else {"name": name}


def wait_for(client: Client, job: JobView, until: str, timeout_s: float) -> JobView:
    """Poll until the job holds devices ('scheduled') or ends ('finished'); a final state ends
    either wait. Raises ``RequestError`` on timeout (the job keeps its place)."""
    targets = set(FINAL_JOB_STATES)
    if until == "scheduled":
        targets |= {"scheduled", "running"}
    deadline = time.monotonic() + timeout_s
    while job.state not in targets:
        if time.monotonic() > deadline:
            raise RequestError(
                "--timeout", timeout_s, f"job {job.id} still {job.state}: {job.reason}"
            )
        time.sleep(WAIT_POLL_S)
        job = client.job(job.id)
    return job


@click.command(cls=_SubmitCommand, epilog=CONNECTION_HELP)
@click.argument("spec", nargs=-1)
@click.option("-f", "--file", type=click.Path(dir_okay=False), help="job as YAML (a JobIn body)")
@click.option("--name", help="job label [default: job-<id>]")
@click.option("--queue", help="queue [default: the queue named after the tenant]")
@click.option("--priority", type=int, help="higher runs first and may preempt lower")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="environment (repeat)")
@click.option(
    "--volume",
    "volume_mounts",
    multiple=True,
    metavar="NAME:PATH[:ro]",
    help="mount volume NAME at PATH (repeat; xpupool volume list)",
)
@click.option(
    "--secret",
    "secret_refs",
    multiple=True,
    metavar="NAME[:VAR]",
    help="give the job your secret NAME as the file $XPUPOOL_SECRETS_DIR/NAME, and as the "
    "variable VAR too when given (repeat; xpupool secret set NAME)",
)
@click.option("--image", help="container image [default: run on the host]")
@click.option(
    "--pull",
    type=click.Choice(["if-not-present", "always", "never"]),
    help="when the node pulls --image [default: if-not-present]",
)
@click.option(
    "--pull-secret",
    metavar="NAME",
    help="pull --image with your secret NAME: a registry auth file (podman login --authfile F; "
    "xpupool secret set NAME --from-file F)",
)
@click.option("--on-node-lost", type=click.Choice(["requeue", "fail"]), help="[default: requeue]")
@click.option(
    "--on-site-lost",
    type=click.Choice(["wait", "requeue"]),
    help="when every node of its site stops answering [default: wait]",
)
@click.option("--tenant", help="admin only: submit for this tenant")
@click.option(
    "--max-retries",
    type=click.IntRange(0),
    help="runs again at most this often [default: no limit]",
)
@click.option(
    "--retry-on",
    metavar="CAUSES",
    help="comma list of node_lost, preempted, exit_nonzero, or 'none' [default: node_lost,preempted]",
)
@click.option(
    "--max-runtime", metavar="DURATION", help="stop and fail a run longer than this (90s, 2h, ...)"
)
@click.option(
    "--reservation",
    metavar="NAME",
    help="run in this reservation of the tenant: it waits for the window, runs on its cards",
)
@click.option(
    "--preemptible",
    is_flag=True,
    help="may borrow cards reserved for others, and is preempted when their window begins",
)
@click.option(
    "--wait",
    is_flag=True,
    help="wait until the job is scheduled (or --until finished); a served model: until ready",
)
@click.option(
    "--until",
    type=click.Choice(["scheduled", "finished"]),
    default="scheduled",
    show_default=True,
    help="what --wait waits for; 'finished' exits 1 unless the job succeeded",
)
@click.option("--timeout", default=600.0, show_default=True, help="--wait limit, seconds")
@click.option("--model", "model", help="serve a catalog model: the server picks cards and image")
@model_options
@click.option("--model-path", help="with --model: weights path for the runtime [default: hub id]")
@click.option("--dry-run", is_flag=True, help="with --model: print the plan, submit nothing")
@connection_options
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    help="the port the process listens on: 0 = on $PORT (the agent picks it); with --image, N = "
    "on N inside the container, published on a node port (the job's view shows it)",
)
@output_option
@click.pass_context
def submit(
    ctx: click.Context,
    spec: tuple[str, ...],
    file: str | None,
    name: str | None,
    queue: str | None,
    priority: int | None,
    env_pairs: tuple[str, ...],
    volume_mounts: tuple[str, ...],
    secret_refs: tuple[str, ...],
    image: str | None,
    pull: str | None,
    pull_secret: str | None,
    port: int | None,
    on_node_lost: str | None,
    on_site_lost: str | None,
    tenant: str | None,
    max_retries: int | None,
    retry_on: str | None,
    max_runtime: str | None,
    reservation: str | None,
    preemptible: bool,
    wait: bool,
    until: str,
    timeout: float,
    model: str | None,
    task: str,
    precision: str | None,
    context: str | None,
    concurrency: int,
    method: str | None,
    model_path: str | None,
    dry_run: bool,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Submit a job: SPEC in the compact syntax, the program after --; or --model to serve a
    catalog model (the server fills devices, image, command and port; docs/models.md).

    \b
    xpupool submit "A100 mem=20Gi" -- python train.py
    xpupool submit L20:2 --queue research --env EPOCHS=3 -- ./run.sh
    xpupool submit A100 --secret hf-token:HF_TOKEN -- python train.py
    xpupool submit L20 --volume datasets:/data:ro --image trainer:1 -- python train.py
    xpupool submit -f job.yaml --wait --until finished
    xpupool submit --model qwen2.5-7b --task serve --context 32k --dry-run

    A served model (--model M --task serve) is created as a service (xpupool serve --model M).
    """
    overrides: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "priority": priority,
        "image": image,
        "pull": pull,
        "pull_secret": pull_secret,
        "port": port,
        "on_node_lost": on_node_lost,
        "on_site_lost": on_site_lost,
        "tenant": tenant,
        "max_retries": max_retries,
        "retry_on": retry_causes(retry_on),
        "max_runtime_s": _seconds("--max-runtime", max_runtime),
        "reservation": reservation,
        "preemptible": True if preemptible else None,
        "secrets": [_secret_ref(r) for r in secret_refs] or None,
        "volumes": [_volume_mount(m) for m in volume_mounts] or None,
    }
    argv = ctx.meta.get("xpupool.argv")
    if model is None and (model_path or dry_run):
        raise RequestError("--model", None, "--model-path and --dry-run need --model")
    if model is not None:
        block = intent(model, task, precision, context, concurrency, method)
        if dry_run:
            from xpupool.server.schemas.models import ModelIntent

            with make_client(url, token) as client:
                rows = client.plan(ModelIntent.model_validate(block))
            emit(output, rows, lambda: plan_table([r for r in rows if r.feasible]))
            return
        overrides["model"] = block | ({"model_path": model_path} if model_path else {})
    body = build_job(spec, argv, file, overrides, dict(env_pair(p, "--env") for p in env_pairs))
    if model is not None and task == "serve":  # a served model is a service (docs/services.md)
        from xpupool.client.cli_services import create_and_show, service_body

        kept = body.model_copy(update={"name": "", "tenant": None})
        kept.model_fields_set.difference_update({"name", "tenant"})
        named = service_body(name or model, kept, None, None, None, None, None, tenant)
        create_and_show(url, token, named, output, timeout if wait else None)
        return
    with make_client(url, token) as client:
        job = client.submit(body)
        if output == "table":
            click.echo(f"job {job.id} ({job.name}) submitted to queue {job.queue}: {job.state}")
        if wait:
            job = wait_for(client, job, until, timeout)
    if output == "json" or wait:
        emit(output, job, lambda: job_detail(job))
    if wait and until == "finished" and job.state != "succeeded":
        ctx.exit(1)


@click.command(epilog=CONNECTION_HELP)
@click.option("--state", type=click.Choice(JOB_STATES))
@click.option("--queue")
@click.option("--tenant", help="admin only")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@connection_options
@output_option
def jobs(
    state: str | None,
    queue: str | None,
    tenant: str | None,
    limit: int,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """List jobs, newest first."""
    with make_client(url, token) as client:
        found = client.jobs(state=state, queue=queue, tenant=tenant, limit=limit)
    emit(output, found, lambda: jobs_table(found))


@click.command(epilog=CONNECTION_HELP)
@click.argument("job_id", type=click.IntRange(1))
@connection_options
@output_option
def job(job_id: int, url: str | None, token: str | None, output: str) -> None:
    """One job: state, why it waits, where it runs, what happened."""
    with make_client(url, token) as client:
        found = client.job(job_id)
    emit(output, found, lambda: job_detail(found))


@click.command(epilog=CONNECTION_HELP)
@click.argument("job_id", type=click.IntRange(1))
@connection_options
@output_option
def cancel(job_id: int, url: str | None, token: str | None, output: str) -> None:
    """Cancel a job; a running one is stopped by its agent first."""
    with make_client(url, token) as client:
        found = client.cancel(job_id)
    if output == "json":
        emit(output, found, lambda: job_detail(found))
    else:
        click.echo(f"job {found.id}: {found.state} ({found.reason})")


@click.command(epilog=CONNECTION_HELP)
@click.argument("name_or_id")
@click.option("--replica", type=click.IntRange(0), default=0, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends")
@click.option("--interval", default=1.0, show_default=True, help="--follow poll period, s")
@connection_options
def logs(
    name_or_id: str,
    replica: int,
    follow: bool,
    interval: float,
    url: str | None,
    token: str | None,
) -> None:
    """Print a replica's captured stdout and stderr; for a service's NAME, those of every
    replica, each line prefixed with the replica's job name ([chat-2] ...)."""
    with make_client(url, token) as client:
        if not name_or_id.isdigit():
            from xpupool.client.log_follow import follow_jobs, service_jobs

            replicas = service_jobs(client, name_or_id)
            out = sys.stdout.buffer

            def write(data: bytes) -> None:
                out.write(data)
                out.flush()

            follow_jobs(
                client, replicas, write, follow=follow, interval_s=interval, more_may_come=True
            )
            return
        job_id = int(name_or_id)
        if job_id < 1:
            raise click.BadParameter(
                f"{name_or_id!r}: a job id is 1 or more", param_hint="NAME_OR_ID"
            )
        offset = 0
        last = False
        while True:
            skipped, chunk = client.logs(job_id, replica=replica, offset=offset)
            if skipped:
                click.echo(skipped_note(skipped), err=True)
            offset += skipped + len(chunk)
            click.echo(chunk, nl=False)  # bytes go to the binary stream as they are
            if chunk or last:
                if last and not chunk:
                    return
                continue
            if not follow:
                return
            if client.job(job_id).state in FINAL_JOB_STATES:
                last = True  # one last read: output written between the read and the check
                continue
            time.sleep(interval)
