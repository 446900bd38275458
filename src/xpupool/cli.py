"""The ``xpupool`` command: one entry point, one sub-command per job."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

import click
from rich.console import Console

from xpupool.agent.launch.options import launch_options
from xpupool.log_setup import verbose_option
from xpupool.model.errors import XpupoolError
from xpupool.start_options import catalog_option, check_policies, load_catalog, load_profiles

if TYPE_CHECKING:
    from xpupool.server.routers.deps import MetricsAuth

# The engine's default profile (engine/profile.py DEFAULT_PROFILE), named here so that client commands
# start without importing the engine.
DEFAULT_PROFILE = "xpupool"


class _Group(click.Group):
    """Reports xpupool's own errors (bad input: field, value, reason) as one clean line, exit 1."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except XpupoolError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Group)
@click.version_option(package_name="xpupool")
def main() -> None:
    """xpupool: one pool and one scheduler for a mixed accelerator fleet."""


@main.command()
@click.option(
    "--policy",
    default=DEFAULT_PROFILE,
    show_default=True,
    help="xpupool, binpack, spread, topology, fgd, ...",
)
@click.option(
    "--cluster",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML cluster file [default: the packaged two-site mixed pool]",
)
def demo(policy: str, cluster: str | None) -> None:
    """Place a stream of typical requests on a two-site mixed fleet and show the decisions."""
    from xpupool.demo import run_demo

    run_demo(Console(), policy, cluster)


@main.command()
@click.option(
    "--data",
    default=".xpupool",
    show_default=True,
    type=click.Path(file_okay=False, resolve_path=True),
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    envvar="XPUPOOL_PORT",
    show_envvar=True,
    help="port of the API and dashboard; also read from XPUPOOL_PORT (so `make run` takes it)",
)
@click.option(
    "--cluster",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="YAML cluster file of simulated nodes to add (see examples/cluster-mixed.yaml)",
)
@click.option("--db", help="SQLAlchemy URL instead of DATA/state.db (e.g. PostgreSQL)")
@click.option(
    "--logs",
    type=click.Path(file_okay=False, resolve_path=True),
    metavar="DIR",
    help="keep the replicas' logs (DIR/logs) and the in-process agent's files (DIR/agent) here "
    "instead of in the data dir: a filesystem that job output may fill without touching the "
    "store's (DIR/pool-id names the pool: another pool's DIR is refused)",
)
@click.option(
    "--policy",
    default=DEFAULT_PROFILE,
    show_default=True,
    help="default placement profile: a built-in or one of the --profile file",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False, resolve_path=True),
    help="YAML profile file (docs/profiles.md) whose profiles jobs, queues and --policy may name",
)
@click.option("--heartbeat", default=5.0, show_default=True, help="agent heartbeat period, s")
@click.option(
    "--lost-after", default=30.0, show_default=True, help="silence before a node is lost, s"
)
@click.option(
    "--lease",
    type=float,
    default=None,
    metavar="SECONDS",
    help="how long a node's replicas run on without a heartbeat the server answered (their "
    "supervisors stop them then; a silent node's jobs run elsewhere only after it) "
    "[default: 5 heartbeats and at least 20 s, at most 80% of --lost-after]",
)
@click.option(
    "--store-lease",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="how long this server owns the store without renewing (it renews every fifth of it): "
    "another server on the same database (--db) is refused until then, and may take the "
    "store 2 s after it ends (docs/security.md)",
)
@click.option("--agent/--no-agent", default=True, show_default=True, help="in-process local agent")
@click.option(
    "--max-body",
    default="1Mi",
    show_default=True,
    metavar="SIZE",
    help="largest request body taken (bytes, or 512Ki, 8Mi, ...); larger is 413, before the "
    "token is checked (an agent's log upload may always send 1 MiB)",
)
@click.option(
    "--reinitialise",
    is_flag=True,
    help="Start a new pool although the database is missing or empty while DATA holds an "
    "earlier pool's files (moved to DATA/old-<time>/; job ids continue above the old ones)",
)
@click.option(
    "--rotate-admin-token",
    is_flag=True,
    help="Write a new DATA/admin-token (mode 0600) and revoke every earlier admin token",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM certificate (chain) to serve HTTPS with; give --tls-key too",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM private key of --tls-cert",
)
@click.option(
    "--retain-jobs",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="finished jobs (with their events and logs) are deleted this long after they ended "
    "(30m, 12h, 7d, ...; 'forever' keeps them)",
)
@click.option(
    "--retain-count",
    default=10_000,
    show_default=True,
    type=click.IntRange(0),
    help="at most this many finished jobs are kept per tenant, each tenant's oldest deleted "
    "first, so no tenant's jobs push out another's (0: no limit)",
)
@click.option(
    "--audit-keep",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="audit rows kept of the admin's actions, and as many of agents' registrations and "
    "exchanges; refused agent requests never push them out (docs/security.md)",
)
@click.option(
    "--audit-keep-refused",
    default=10_000,
    show_default=True,
    type=click.IntRange(1),
    help="audit rows kept of agent credentials' refused requests, each one credential's "
    "refusals of one kind in a minute, with their count (docs/security.md)",
)
@click.option(
    "--history-interval",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="how often the server samples the fleet for its history (GET /v1/fleet/history; "
    "docs/fleet-overview.md): 10s, 1m, ...",
)
@click.option(
    "--http-workers",
    default=0,
    show_default=True,
    type=click.IntRange(0, 64),
    help="processes that take the API's connections and pass them to the control plane, so "
    "that its one interpreter spends its time on the pool, not on HTTP (0: the plane serves "
    "HTTP itself); one is enough for about 1,000 submissions/s (docs/benchmarks.md)",
)
@click.option(
    "--rate-limit",
    default="50/200",
    show_default=True,
    metavar="RATE[/BURST]",
    help="requests a second per token (or dashboard session) on average, BURST at once; more "
    "is 429 with Retry-After, refused requests counted too; 0: no limit (docs/security.md)",
)
@click.option(
    "--address-rate-limit",
    default="10/50",
    show_default=True,
    metavar="RATE[/BURST]",
    help="requests a second per source address that carry no valid token (none, unknown, "
    "revoked, expired); past it a token not seen yet is refused before it is looked up; 0: no "
    "limit",
)
@click.option(
    "--header-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="a connection whose request header is not whole this long after it opened (or after "
    "the request's first byte) is closed",
)
@click.option(
    "--connections-per-address",
    default=128,
    show_default=True,
    type=click.IntRange(0),
    metavar="N",
    help="open connections one source address may hold (per HTTP worker with --http-workers); "
    "more is 429 and closed at once; raise it for many agents behind one NAT address; 0: no "
    "limit",
)
@click.option(
    "--metrics-auth",
    type=click.Choice(["token", "open"]),
    default="token",
    show_default=True,
    help="who may read /metrics, which names every tenant, queue and node: token, the admin "
    "token or a metrics token (xpupool token issue --metrics); open, anyone who reaches the port",
)
@catalog_option
@launch_options
@verbose_option
def up(
    data: str,
    host: str,
    port: int,
    cluster: str | None,
    db: str | None,
    logs: str | None,
    policy: str,
    profile_file: str | None,
    heartbeat: float,
    lost_after: float,
    lease: float | None,
    store_lease: float,
    agent: bool,
    job_uid_range: str,
    job_root: str | None,
    log_cap: str,
    log_reserve: str,
    sandbox: str,
    runtime: str,
    device_root: str,
    pids_limit: int,
    reinitialise: bool,
    rotate_admin_token: bool,
    tls_cert: str | None,
    tls_key: str | None,
    max_body: str,
    retain_jobs: str,
    retain_count: int,
    audit_keep: int,
    audit_keep_refused: int,
    history_interval: str,
    catalog_file: str | None,
    http_workers: int,
    rate_limit: str,
    address_rate_limit: str,
    header_timeout: float,
    connections_per_address: int,
    metrics_auth: str,
    verbose: bool,
) -> None:
    """Start the control plane: REST API, scheduler, SQLite state, metrics, local agent."""
    from pathlib import Path

    from xpupool.client._times import duration_s
    from xpupool.server.audit import AuditKeep
    from xpupool.server.retention import Retention

    retain_s = None if retain_jobs == "forever" else duration_s(retain_jobs)
    if retain_jobs != "forever" and not retain_s:
        raise click.BadParameter(
            f"{retain_jobs!r}: use a duration such as 12h or 7d, or 'forever'",
            param_hint="--retain-jobs",
        )

    history_s = duration_s(history_interval)
    if not history_s:
        raise click.BadParameter(
            f"{history_interval!r}: use a duration above 0 such as 30s or 1m",
            param_hint="--history-interval",
        )

    from xpupool.server.body_limit import parse_size

    try:
        max_body_bytes = parse_size(max_body)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-body") from None

    from xpupool.server.rate_limit import parse_rate

    rates = {}
    for hint, text in (("--rate-limit", rate_limit), ("--address-rate-limit", address_rate_limit)):
        try:
            rates[hint] = parse_rate(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from None

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    profiles = load_profiles(profile_file)
    check_policies([policy], profiles)
    catalog = load_catalog(catalog_file)

    from xpupool.server.lease import Lease

    try:
        Lease.for_settings(heartbeat, lost_after, lease)
    except XpupoolError as exc:
        raise click.BadParameter(str(exc), param_hint="--lease") from None

    from xpupool.server.connection_guard import ConnectionLimits
    from xpupool.server.up import UpConfig, serve

    cfg = UpConfig(
        data=Path(data),
        host=host,
        port=port,
        cluster=Path(cluster) if cluster else None,
        db=db,
        profile=policy,
        profiles=tuple(profiles.values()),
        heartbeat_s=heartbeat,
        lost_after_s=lost_after,
        lease_s=lease,
        agent=agent,
        job_uid_range=job_uid_range,
        job_root=job_root,
        sandbox=sandbox,
        runtime=runtime,
        device_root=device_root,
        pids_limit=pids_limit,
        verbose=verbose,
        log_cap=log_cap,
        log_reserve=log_reserve,
        logs=Path(logs) if logs else None,
        reinitialise=reinitialise,
        rotate_admin_token=rotate_admin_token,
        tls_cert=Path(tls_cert) if tls_cert else None,
        tls_key=Path(tls_key) if tls_key else None,
        max_body=max_body_bytes,
        retention=Retention(retain_s, retain_count or None),
        audit_keep=AuditKeep(audit_keep, audit_keep, audit_keep_refused),
        history_interval_s=history_s,
        catalog=catalog,
        http_workers=http_workers,
        store_lease_s=store_lease,
        rate_limit=rates["--rate-limit"],
        address_rate_limit=rates["--address-rate-limit"],
        connections=ConnectionLimits(header_timeout, connections_per_address),
        metrics_auth=cast("MetricsAuth", metrics_auth),  # a click.Choice of the same names
    )
    serve(cfg, click.echo)


@main.command()
@click.argument("text")
def spec(text: str) -> None:
    """Show the JSON request that a compact device spec stands for, e.g. 'A100:80GB:2'."""
    from xpupool.model.request_model import request_from_dict, request_to_dict

    click.echo(json.dumps(request_to_dict(request_from_dict(text)), indent=2))


def parse_seeds(text: str) -> list[int]:
    """'42-51' or '42,45,47' -> seeds."""
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            return list(range(low, high + 1))
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use a range such as 42-51 or a list such as 42,43"
        ) from None


@main.command()
@click.option(
    "--nodes",
    "nodes_path",
    type=click.Path(exists=True, dir_okay=False),
    help="node list CSV [default: openb_node_list_gpu_node.csv of the Alibaba GPU trace: "
    "$XPUPOOL_TRACES, else shared/traces/alibaba-gpu-v2023 beside the repository]",
)
@click.option(
    "--pods",
    "pods_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="pod list CSV (repeat for several traces) [default: openb_pod_list_default.csv "
    "beside the node list]",
)
@click.option(
    "--policy",
    default="random,dotprod,gpuclustering,gpupacking,bestfit,fgd,xpupool",
    show_default=True,
    help="comma-separated engine profiles: built-ins or the --profile file's (with --profile "
    "and no --policy: every profile of the file)",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False),
    help="YAML profile file (docs/profiles.md)",
)
@click.option("--seeds", default="42-51", show_default=True, help="range 42-51 or list 42,43")
@click.option("--tune", default=1.3, show_default=True, help="target GPU demand / capacity")
@click.option("--jobs", default=1, show_default=True, help="parallel processes")
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False),
    help="authors' results folder [default: fgd_expected_results beside the pod list]",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="write an HTML page and PNG plots here",
)
@click.option(
    "--bound",
    is_flag=True,
    help="also compute the packing lower bound on unallocated % (no policy does better)",
)
@click.option("--json", "as_json", is_flag=True, help="print the full results as JSON")
@click.option(
    "--mode",
    type=click.Choice(["fgd", "timed"]),
    default="fgd",
    show_default=True,
    help="fgd: the paper's protocol; timed: arrivals and departures at trace times",
)
@click.option(
    "--queue",
    type=click.Choice(["fifo", "priority"]),
    default="fifo",
    show_default=True,
    help="timed mode: order in which waiting tasks are retried (priority = QoS class)",
)
@click.option(
    "--queue-config",
    type=click.Path(dir_okay=False, exists=True),
    help="timed mode: queues, quotas and tenants in the server's format, and which queue and "
    "priority each task gets (replaces --queue; see docs/simulator.md)",
)
@click.option(
    "--compress",
    default=1.0,
    show_default=True,
    help="timed mode: divide arrival times by this (load what-if); durations unchanged",
)
def simulate(
    nodes_path: str | None,
    pods_paths: tuple[str, ...],
    policy: str,
    profile_file: str | None,
    seeds: str,
    tune: float,
    jobs: int,
    expected_dir: str | None,
    report_dir: str | None,
    as_json: bool,
    bound: bool,
    mode: str,
    queue: str,
    queue_config: str | None,
    compress: float,
) -> None:
    """Replay a cluster trace under each policy and seed (the FGD paper's protocol, or in time)."""
    from pathlib import Path

    from xpupool.client.sim_tables import print_summary
    from xpupool.sim.report import run_traces, write_report
    from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

    if nodes_path is None:
        nodes_path = str(default_nodes())
    profiles = load_profiles(profile_file)
    names = [p.strip() for p in policy.split(",") if p.strip()]
    source = click.get_current_context().get_parameter_source("policy")
    if profiles and source is click.core.ParameterSource.DEFAULT:
        names = list(profiles)
    check_policies(names, profiles)
    policies = [profiles.get(name, name) for name in names]
    if not pods_paths:
        default = Path(nodes_path).parent / DEFAULT_PODS
        if not default.exists():
            raise click.BadParameter("give --pods", param_hint="--pods")
        pods_paths = (str(default),)
    console = Console(stderr=as_json)
    if mode == "timed":
        from xpupool.client.queue_file import load_queue_config
        from xpupool.client.sim_tables import print_timed
        from xpupool.model.errors import RequestError
        from xpupool.sim.report import run_timed_traces

        if compress <= 0:
            raise click.BadParameter("must be positive", param_hint="--compress")
        try:
            queues = load_queue_config(queue_config) if queue_config else None
        except RequestError as exc:
            raise click.BadParameter(str(exc), param_hint="--queue-config") from None
        timed = run_timed_traces(
            nodes_path,
            list(pods_paths),
            policies,
            parse_seeds(seeds),
            queue,
            compress,
            queues,
            console,
        )
        if as_json:
            click.echo(
                json.dumps({"mode": "timed", "queue": queue, "compress": compress, "runs": timed})
            )
        else:
            print_timed(console, timed)
        return
    results = run_traces(
        nodes_path,
        list(pods_paths),
        policies,
        parse_seeds(seeds),
        tune,
        jobs,
        expected_dir,
        console,
        bound,
    )
    if as_json:
        payload = results[0] if len(results) == 1 else {"traces": results}
        click.echo(json.dumps(payload))
    else:
        for result in results:
            print_summary(console, result)
    if report_dir:
        page = write_report(Path(report_dir), results)
        console.print(f"report: {page}")


@main.command()
@click.option(
    "--fake",
    "fake_path",
    type=click.Path(dir_okay=False),
    help="also report devices described in this YAML file (the fake probe)",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def probe(fake_path: str | None, output: str) -> None:
    """Discover this host's accelerators with every vendor probe, and say why a probe found none."""
    from dataclasses import asdict

    from rich.table import Table

    from xpupool.model.quantity import format_mib
    from xpupool.probes import FakeProbe, Probe, discover_host, host_probes

    probes: list[Probe] = host_probes()
    if fake_path:
        probes.append(FakeProbe(fake_path))
    found = discover_host(probes)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "devices": [asdict(d) for d in found.devices],
                    "failures": [
                        {
                            "vendor": f.vendor,
                            "command": f.command,
                            "kind": f.kind.value,
                            "detail": f.detail,
                        }
                        for f in found.failures
                    ],
                    "absent": found.skipped,
                },
                default=str,
            )
        )
        return
    console = Console()
    table = Table(title=f"{len(found.devices)} devices on this host")
    for column in ("index", "vendor", "model", "memory", "used", "driver", "link", "health"):
        table.add_column(column)
    for d in found.devices:
        used = "-" if d.memory_used_mib is None else format_mib(d.memory_used_mib)
        table.add_row(
            str(d.index),
            d.vendor,
            d.canonical_model or d.model,
            format_mib(d.memory_total_mib),
            used,
            d.driver_version or "-",
            d.link_group or "-",
            d.health.value,
        )
    console.print(table)
    for failure in found.failures:
        console.print(f"[yellow]{failure}[/]")
    if found.skipped:
        console.print(f"no library or tool for: {', '.join(found.skipped)}")


# The control plane's client commands (xpupool/client): they import httpx, pydantic and
# server/schemas/ only, never FastAPI or SQLAlchemy (tests/unit/cli/test_imports.py).
from xpupool.client import cli_admin, cli_catalog, cli_fleet, cli_jobs, cli_models  # noqa: E402

for _command in (
    cli_jobs.submit,
    cli_jobs.jobs,
    cli_jobs.job,
    cli_jobs.logs,
    cli_jobs.cancel,
    cli_fleet.nodes,
    cli_fleet.devices,
    cli_fleet.sites,
    cli_fleet.queues,
    cli_catalog.accelerators,
    cli_models.plan_command,
    cli_models.models_command,
    cli_fleet.top,
    cli_fleet.node,
    cli_fleet.device,
    cli_admin.tenant,
    cli_admin.token,
    cli_admin.queue,
    cli_admin.audit,
):
    main.add_command(_command)

from xpupool.agent.command import agent_command  # noqa: E402

main.add_command(agent_command)

from xpupool.k8s.cli import k8s  # noqa: E402

main.add_command(k8s)
