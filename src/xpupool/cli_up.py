"""``xpupool up``: the control plane's command, its options and their checks before anything
starts. Its own module so that the CLI's other commands do not import what its options need (the
launch options name the agent's back ends); cli.py names it in its table of commands."""

from __future__ import annotations

import gc
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import click
from click.core import ParameterSource

from xpupool.agent.launch.options import launch_options, launch_settings
from xpupool.log_setup import configure_logging, verbose_option
from xpupool.model.errors import XpupoolError
from xpupool.start_options import (
    DEFAULT_PROFILE,
    catalog_option,
    check_policies,
    consolidate_options,
    consolidation_rule,
    defrag_budget_options,
    faster_rule,
    load_catalog,
    load_profiles,
    move_faster_options,
)

if TYPE_CHECKING:
    from xpupool.agent.launch import LaunchSettings
    from xpupool.engine.cycle.defrag import DisruptionBudget
    from xpupool.model.site_network import SiteNetwork
    from xpupool.probes.container_runtime import RuntimeChoice
    from xpupool.server.routers.deps import MetricsAuth
    from xpupool.server.sites import Site

T = TypeVar("T")


def load_site_file(path: str | None) -> tuple[Site, ...]:
    """The sites of ``--sites FILE`` (none without it), built but not started (``xpupool up``
    attaches them to the plane); a bad file is one line naming the file and the field, exit 1,
    before anything starts."""
    if path is None:
        return ()
    from xpupool.k8s.site import kubernetes_sites

    try:
        return kubernetes_sites(path)
    except XpupoolError as exc:
        raise click.ClickException(f"--sites {path}: {exc}") from None


def load_agent_link_domain(path: str | None) -> str | None:
    """The agent pool's ``link_domain_label`` in ``--sites FILE`` (None without one); a bad file
    as :func:`load_site_file`."""
    if path is None:
        return None
    from xpupool.k8s.site.sites_file import load_agent_pool

    try:
        return load_agent_pool(path).link_domain_label
    except XpupoolError as exc:
        raise click.ClickException(f"--sites {path}: {exc}") from None


def load_site_network(path: str | None) -> SiteNetwork:
    """The links and datasets of ``--sites FILE`` (none without it); a bad file as
    :func:`load_site_file`."""
    from xpupool.model.site_network import SiteNetwork

    if path is None:
        return SiteNetwork()
    from xpupool.k8s.site.sites_file import load_site_network as load

    try:
        return load(path)
    except XpupoolError as exc:
        raise click.ClickException(f"--sites {path}: {exc}") from None


def in_background(make: Callable[[], T], name: str) -> Callable[[], T]:
    """``make()`` on a thread of its own, started now; the function returned waits for it, then
    returns what it returned or raises what it raised."""
    made: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(make())
        except BaseException as exc:  # raised again where the result is asked for
            failed.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if failed:
            raise failed[0]
        return made[0]

    return result


@click.command()
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
@click.option(
    "--sites",
    "sites_file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    metavar="FILE",
    help="YAML sites file: Kubernetes clusters the plane manages as sites (docs/kubernetes.md)",
)
@click.option(
    "--db",
    envvar="XPUPOOL_DB",
    show_envvar=True,
    help="SQLAlchemy URL instead of DATA/state.db (e.g. PostgreSQL); from the environment, a "
    "password in it stays off the command line",
)
@click.option(
    "--logs",
    type=click.Path(file_okay=False, resolve_path=True),
    metavar="DIR",
    help="keep the replicas' logs (DIR/logs) and the in-process agent's files (DIR/agent) here "
    "instead of in the data dir: a filesystem that job output may fill without touching the "
    "store's (DIR/pool-id names the pool: another pool's DIR is refused)",
)
@click.option(
    "--secret-key-file",
    type=click.Path(dir_okay=False, resolve_path=True),
    metavar="FILE",
    help="the key tenants' secrets are sealed under (made, mode 0600, when missing); default "
    "DATA/secret.key, which protects a leaked database or backup but not a leaked data dir",
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
    "--card-settle",
    default=300.0,
    show_default=True,
    help="how long a card read unhealthy must read healthy before it takes work again, s "
    "(or the admin uncordons it: xpupool device uncordon UUID)",
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
@click.option(
    "--standby",
    is_flag=True,
    help="on a database another xpupool up owns (--db): answer 503 on the port and take the "
    "store over when that server's lease ends, then start (docs/postgresql.md)",
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
    "--admin-token-file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    metavar="FILE",
    help="the admin token is the one in FILE (e.g. a Kubernetes Secret that a standby shares), "
    "not one this server makes: stored, every other admin token revoked, unless it is already "
    "the admin's; copied to DATA/admin-token",
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
    "--usage-interval",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="how often usage records are advanced and written (a crash loses at most this much; "
    "each write costs CPU per held card: docs/benchmarks.md, metering)",
)
@click.option(
    "--max-grace",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="the longest grace (SIGTERM to SIGKILL) a job may ask for with grace=; a longer one is "
    "refused at submission (docs/jobs.md, stopping well). At most 1h",
)
@click.option(
    "--recut-min-idle",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="how long a card's partition must have held nothing before a re-cut may destroy it "
    "(xpupool node recut; docs/capacity.md, re-cutting)",
)
@click.option(
    "--fair-share",
    type=click.Choice(["drf", "history"]),
    default="drf",
    show_default=True,
    help="the admission order between tenants: 'drf' by the dominant share each holds now, "
    "'history' by the share each held over a window decaying with --fair-share-half-life "
    "(docs/queues.md)",
)
@click.option(
    "--fair-share-half-life",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="with --fair-share history: what a tenant held this long ago counts half",
)
@click.option(
    "--defrag",
    is_flag=True,
    help="move the fewest running jobs that declare a checkpoint signal (checkpoint, stop, "
    "requeue) so that a job that fits nowhere fits, within the budget below "
    "(docs/defragmentation.md)",
)
@defrag_budget_options("jobs", 1.0)
@consolidate_options("job")
@move_faster_options("")
@click.option(
    "--usage-retention",
    default="400d",
    show_default=True,
    metavar="DURATION",
    help="usage records and their hourly, daily and monthly sums are kept this long, apart from "
    "--retain-jobs (GET /v1/usage; docs/usage.md)",
)
@click.option(
    "--proxy-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="also serve services' proxy paths (/v1/services/NAME/proxy/...) on this port, from a "
    "process of their own that adds less latency than the API's port (docs/services.md); "
    "HTTPS with --tls-cert/--tls-key, else plain HTTP; 0: any free port (printed)",
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
    help="open connections one source address may hold (on the API's port and the proxy's); "
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
@click.option(
    "--model-cache",
    metavar="VOLUME",
    default=None,
    help="a declared volume (xpupool volume create) that model jobs mount read-write at their "
    "serving runtime's cache path (vLLM: HF_HOME), so a second replica on a node does not "
    "download the weights again; a job that mounts something there keeps its own",
)
@catalog_option
@launch_options
@verbose_option
def up(
    data: str,
    host: str,
    port: int,
    cluster: str | None,
    sites_file: str | None,
    db: str | None,
    logs: str | None,
    secret_key_file: str | None,
    policy: str,
    profile_file: str | None,
    heartbeat: float,
    lost_after: float,
    card_settle: float,
    lease: float | None,
    store_lease: float,
    standby: bool,
    agent: bool,
    job_uid_range: str,
    job_root: str | None,
    log_cap: str,
    log_reserve: str,
    sandbox: str,
    runtime: str,
    device_root: str,
    pids_limit: int,
    network: str,
    allow_network: tuple[str, ...],
    pull_timeout: float,
    hami_core: str | None,
    mps: bool,
    reinitialise: bool,
    rotate_admin_token: bool,
    admin_token_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    max_body: str,
    retain_jobs: str,
    retain_count: int,
    audit_keep: int,
    audit_keep_refused: int,
    history_interval: str,
    usage_interval: str,
    max_grace: str,
    recut_min_idle: str,
    fair_share: str,
    fair_share_half_life: str,
    defrag: bool,
    defrag_moves_per_hour: int,
    defrag_lost_gpu_hours: float,
    defrag_min_cards: float,
    consolidate: bool,
    consolidate_quiet: str,
    consolidate_every: str,
    move_faster: bool,
    move_faster_speedup: float,
    move_faster_gain: str,
    move_faster_restart: str,
    usage_retention: str,
    catalog_file: str | None,
    proxy_port: int | None,
    rate_limit: str,
    address_rate_limit: str,
    header_timeout: float,
    connections_per_address: int,
    metrics_auth: str,
    model_cache: str | None,
    verbose: bool,
) -> None:
    """Start the control plane: REST API, scheduler, SQLite state, metrics, local agent."""
    # No cyclic collection while the server starts: its imports and tables are thousands of
    # objects that all live on, and each collection walks them again; server/up.py freezes them
    # (heap_freeze.py) and turns the collector back on before it serves.
    gc.disable()
    click.get_current_context().call_on_close(gc.enable)  # also when the start is refused
    configure_logging(verbose)  # before the probe below logs what it found
    launch: Callable[[], LaunchSettings] | None = None
    if agent:
        # The in-process agent's launch settings ask the container runtime (`podman info` or
        # `docker info`, a wait: docs/benchmarks/startup-42.md) and try the sandbox: now, on a
        # thread, while the server's modules import and its store opens. The agent is built
        # with them, so no node of its is registered, nor offered image jobs, before its
        # runtime is known; a bad option is raised where it was before, after the store opened
        # (server/up.py).
        launch = in_background(
            lambda: launch_settings(
                job_uid_range,
                job_root,
                log_cap,
                sandbox,
                cast("RuntimeChoice", runtime),  # a click.Choice of the same names
                device_root,
                (Path(data), *((Path(logs),) if logs else ())),
                pids_limit,
                log_reserve=log_reserve,
                network=network,
                pull_timeout=pull_timeout,
                allow_network=allow_network,
                hami_core=hami_core,
                mps=mps,
            ),
            "xpupool-launch-probe",
        )
    from xpupool.client._times import duration_s
    from xpupool.model.stopping import MAX_GRACE_S
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

    usage_every_s = duration_s(usage_interval)
    if not usage_every_s:
        raise click.BadParameter(
            f"{usage_interval!r}: use a duration above 0 such as 15s or 1m",
            param_hint="--usage-interval",
        )
    max_grace_s = duration_s(max_grace)
    if not max_grace_s or max_grace_s > MAX_GRACE_S:
        raise click.BadParameter(
            f"{max_grace!r}: use a duration above 0 and at most 1h, such as 30s or 10m",
            param_hint="--max-grace",
        )
    recut_min_idle_s = duration_s(recut_min_idle)
    if recut_min_idle_s is None:
        raise click.BadParameter(
            f"{recut_min_idle!r}: use a duration such as 0s, 5m or 1h",
            param_hint="--recut-min-idle",
        )
    half_life_s = duration_s(fair_share_half_life)
    if not half_life_s:
        raise click.BadParameter(
            f"{fair_share_half_life!r}: use a duration above 0 such as 30m or 1h",
            param_hint="--fair-share-half-life",
        )
    budget = _defrag_budget(defrag, defrag_moves_per_hour, defrag_lost_gpu_hours, defrag_min_cards)
    faster = faster_rule(move_faster, move_faster_speedup, move_faster_gain, move_faster_restart)
    quiet = consolidation_rule(consolidate, defrag, consolidate_quiet, consolidate_every)
    usage_keep_s = duration_s(usage_retention)
    if not usage_keep_s:
        raise click.BadParameter(
            f"{usage_retention!r}: use a duration above 0 such as 90d or 400d",
            param_hint="--usage-retention",
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
    sites = load_site_file(sites_file)
    site_network = load_site_network(sites_file)
    agent_link_domain = load_agent_link_domain(sites_file)
    catalog = load_catalog(catalog_file)
    from xpupool.server.schemas.base import NAME_PATTERN

    if model_cache is not None and not re.fullmatch(NAME_PATTERN, model_cache):
        raise click.BadParameter(
            f"{model_cache!r} is not a volume name", param_hint="--model-cache"
        )

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
        card_settle_s=card_settle,
        lease_s=lease,
        agent=agent,
        verbose=verbose,
        log_cap=log_cap,
        log_reserve=log_reserve,
        logs=Path(logs) if logs else None,
        secret_key_file=Path(secret_key_file) if secret_key_file else None,
        admin_token_file=Path(admin_token_file) if admin_token_file else None,
        reinitialise=reinitialise,
        rotate_admin_token=rotate_admin_token,
        tls_cert=Path(tls_cert) if tls_cert else None,
        tls_key=Path(tls_key) if tls_key else None,
        max_body=max_body_bytes,
        retention=Retention(retain_s, retain_count or None),
        audit_keep=AuditKeep(audit_keep, audit_keep, audit_keep_refused),
        history_interval_s=history_s,
        usage_retention_s=usage_keep_s,
        usage_interval_s=usage_every_s,
        max_grace_s=max_grace_s,
        recut_min_idle_s=recut_min_idle_s,
        fair_share_half_life_s=half_life_s if fair_share == "history" else None,
        defrag=budget,
        defrag_min_cards=defrag_min_cards,
        consolidate=quiet,
        move_faster=faster,
        catalog=catalog,
        model_cache=model_cache,
        proxy_port=proxy_port,
        store_lease_s=store_lease,
        standby=standby,
        rate_limit=rates["--rate-limit"],
        address_rate_limit=rates["--address-rate-limit"],
        connections=ConnectionLimits(header_timeout, connections_per_address),
        metrics_auth=cast("MetricsAuth", metrics_auth),  # a click.Choice of the same names
        launch=launch,
        sites=sites,
        site_network=site_network,
        agent_link_domain_label=agent_link_domain,
    )
    serve(cfg, click.echo)


def _defrag_budget(
    on: bool, moves_per_hour: int, lost_gpu_hours: float, min_cards: float
) -> DisruptionBudget | None:
    """``up --defrag``'s disruption budget (None: off). A budget flag without ``--defrag``, or
    an amount that is not a finite number, is refused naming its flag."""
    from xpupool.engine.cycle.defrag import DisruptionBudget

    ctx = click.get_current_context()
    for name, value in (("lost_gpu_hours", lost_gpu_hours), ("min_cards", min_cards)):
        if not math.isfinite(value):
            hint = f"--defrag-{name.replace('_', '-')}"
            raise click.BadParameter(f"{value}: use a finite number", param_hint=hint)
    if not on:
        for name in ("moves_per_hour", "lost_gpu_hours", "min_cards"):
            if ctx.get_parameter_source(f"defrag_{name}") is not ParameterSource.DEFAULT:
                hint = f"--defrag-{name.replace('_', '-')}"
                raise click.BadParameter("needs --defrag", param_hint=hint)
        return None
    return DisruptionBudget(moves_per_hour, lost_gpu_hours)
