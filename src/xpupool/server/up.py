"""``xpupool up``: the whole control plane in one process on one host.

Data lives under ``--data`` (default ``./.xpupool``; the CLI makes it, and every other path
option, absolute as it parses them, because the replicas' supervisors work in ``/``):
``state.db`` (SQLite, WAL), ``pool`` (the pool's id, a mark above every job id handed out),
``admin-token`` (mode 0600, written on first start, replaced by ``--rotate-admin-token``),
``logs/`` and ``agent/`` (the in-process agent's; both under ``--logs ROOT`` instead when given,
to keep job output off the store's filesystem). ``--db`` takes any SQLAlchemy URL instead
(PostgreSQL: ``postgresql+psycopg://...``). What a start refuses, and why: ``server/datadir.py``.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xpupool.catalog.images import default_image_catalog
from xpupool.catalog.operator_file import OperatorCatalog
from xpupool.catalog.power import PowerModel
from xpupool.disk_reserve import DEFAULT_LOG_RESERVE
from xpupool.engine.cycle.consolidate import ConsolidationRule
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.engine.cycle.faster_cards import FasterRule
from xpupool.engine.fragmentation import kernels
from xpupool.engine.profile import DEFAULT_PROFILE, Profile
from xpupool.log_setup import configure_logging
from xpupool.model.site_network import SiteNetwork
from xpupool.model.stopping import MAX_GRACE_S
from xpupool.server.admin_token import admin_token_path
from xpupool.server.audit import AuditKeep
from xpupool.server.body_limit import DEFAULT_MAX_BODY
from xpupool.server.connection_guard import ConnectionLimits, guarded_protocol
from xpupool.server.front.plane_side import ProxyChannel
from xpupool.server.front.sockets import PlaneSockets, listen
from xpupool.server.heap_freeze import QUIET_CHECK_S, SurvivorFreeze, freeze_start_heap
from xpupool.server.ownership import DEFAULT_STORE_LEASE_S, Identity, StoreOwnership
from xpupool.server.plane import (
    DEFAULT_HISTORY_INTERVAL_S,
    ControlPlane,
    consolidation_moves,
    defrag_moves,
    faster_moves,
)
from xpupool.server.plane.card_idle import DEFAULT_MIN_IDLE_S
from xpupool.server.plane.defrag_moves import DEFAULT_MIN_CARDS
from xpupool.server.rate_limit import ADDRESS_RATE, TOKEN_RATE, Rate, RateLimiter
from xpupool.server.retention import Retention
from xpupool.server.routers.deps import MetricsAuth
from xpupool.server.services.model_cache import model_cache_line
from xpupool.server.sites import AgentPoolSite, Site, Sites
from xpupool.server.usage.meter import DEFAULT_EVERY_S, DEFAULT_KEEP_DAYS

if TYPE_CHECKING:
    from xpupool.agent.launch import LaunchSettings
    from xpupool.server.front.proxy_main import ProxyProcess

log = logging.getLogger("xpupool.server")


@dataclass(frozen=True, slots=True)
class UpConfig:
    data: Path
    host: str = "127.0.0.1"
    port: int = 8080
    cluster: Path | None = None
    db: str | None = None
    profile: str = DEFAULT_PROFILE  # the default profile: a built-in or one of ``profiles``
    profiles: tuple[Profile, ...] = ()  # from --profile FILE (engine/profile_file.py)
    heartbeat_s: float = 5.0
    lost_after_s: float = 30.0
    card_settle_s: float = 300.0  # healthy this long before a card read unhealthy serves again
    lease_s: float | None = None  # None: server/lease.py's default
    agent: bool = True
    log_cap: str = "64Mi"
    log_reserve: str = DEFAULT_LOG_RESERVE  # free space job output never takes (disk_reserve.py)
    logs: Path | None = None  # --logs ROOT: ROOT/logs and ROOT/agent instead of the data dir's
    secret_key_file: Path | None = None  # None: DATA/secret.key (server/secret_box.py)
    reinitialise: bool = False  # a missing/empty database may start a new pool over old files
    rotate_admin_token: bool = False  # write a new admin token, revoking the old one
    admin_token_file: Path | None = None  # --admin-token-file: the admin token (admin_token.py)
    max_body: int = DEFAULT_MAX_BODY  # bytes of a request body taken (server/body_limit.py)
    tls_cert: Path | None = None  # PEM certificate (chain) and key: serve HTTPS; None: HTTP
    tls_key: Path | None = None
    retention: Retention = field(
        default_factory=Retention
    )  # finished jobs kept: --retain-jobs, --retain-count
    audit_keep: AuditKeep = field(
        default_factory=AuditKeep
    )  # audit rows kept per kind: --audit-keep, --audit-keep-refused (server/audit.py)
    history_interval_s: float = DEFAULT_HISTORY_INTERVAL_S  # --history-interval (history.py)
    usage_retention_s: float = DEFAULT_KEEP_DAYS * 86400.0  # --usage-retention (usage/meter.py)
    usage_interval_s: float = DEFAULT_EVERY_S  # --usage-interval: how often records are written
    max_grace_s: float = MAX_GRACE_S  # --max-grace: the longest grace= a job may ask for
    recut_min_idle_s: float = DEFAULT_MIN_IDLE_S  # --recut-min-idle (server/plane/card_recut.py)
    fair_share_half_life_s: float | None = None  # --fair-share history: its half-life; None: DRF
    # --defrag: move movable jobs so a job that fits nowhere fits, within this budget
    # (--defrag-moves-per-hour, --defrag-lost-gpu-hours; server/plane/defrag_moves.py); None: off
    defrag: DisruptionBudget | None = None
    defrag_min_cards: float = DEFAULT_MIN_CARDS  # --defrag-min-cards
    # --consolidate: with --defrag, free cards for the expected large shapes in quiet periods
    # (server/plane/consolidation_moves.py); None: off
    consolidate: ConsolidationRule | None = None
    # --move-faster: running jobs moved to free faster cards by this rule (its margins;
    # server/plane/faster_moves.py); None: off
    move_faster: FasterRule | None = None
    catalog: OperatorCatalog | None = None  # --catalog FILE, parsed and checked by the CLI
    model_cache: str | None = None  # --model-cache VOLUME (server/services/model_cache.py)
    verbose: bool = False  # -v: every request and unread device field (log_setup.py)
    proxy_port: int | None = (
        None  # --proxy-port: the service proxy's own process (front/proxy_main)
    )
    store_lease_s: float = DEFAULT_STORE_LEASE_S  # --store-lease: the owner row's (ownership.py)
    standby: bool = False  # --standby: wait for the store's owner to be lost, then start
    rate_limit: Rate = TOKEN_RATE  # --rate-limit: per credential (server/rate_limit.py)
    address_rate_limit: Rate = ADDRESS_RATE  # --address-rate-limit: per address, no valid token
    connections: ConnectionLimits = field(
        default_factory=ConnectionLimits
    )  # --header-timeout, --connections-per-address (server/connection_guard.py)
    metrics_auth: MetricsAuth = "token"  # --metrics-auth: who may read /metrics
    site_network: SiteNetwork = field(default_factory=SiteNetwork)  # --sites FILE's links, datasets
    # The in-process agent's launch settings (isolation, container runtime: agent/launch/), being
    # found on another thread: cli_up.py starts asking the runtime before the server's imports,
    # and the agent is made with what it found. None: the defaults, no sandbox and no runtime.
    launch: Callable[[], LaunchSettings] | None = None
    # sites beside the agent pool, in order (issue 49's sites file builds them: server/sites/)
    sites: tuple[Site, ...] = ()
    # the sites file's ``agents.link_domain_label``: a gang stays in one of its values
    agent_link_domain_label: str | None = None

    @property
    def tls(self) -> tuple[Path, Path] | None:
        """The certificate and key every port of this plane serves HTTPS with, or None."""
        return (
            None if self.tls_cert is None or self.tls_key is None else (self.tls_cert, self.tls_key)
        )


def build_sites(cfg: UpConfig) -> Sites:
    """The plane's sites: the agent pool first (the nodes ``xpupool agent`` registers and the
    cluster file's; their ``site`` labels name sites of the pool for placement), then
    ``cfg.sites`` in their order. A site of a name already taken is refused."""
    return Sites([AgentPoolSite(link_domain_label=cfg.agent_link_domain_label), *cfg.sites])


def open_plane(cfg: UpConfig, owner: StoreOwnership | None = None) -> ControlPlane:
    """The plane with its admin token and cluster-file nodes in place; logs, prints nothing.
    A data dir or database that cannot be opened as it is raises DataDirError (one line).
    ``owner``: claimed before the first write, and checked by every commit after it
    (``server/ownership.py``); a store another server owns raises StoreInUseError (one line)."""
    from sqlalchemy.exc import DatabaseError, OperationalError

    from xpupool.agent.launch.guard import make_private
    from xpupool.model.quantity import parse_memory_mib
    from xpupool.probes.cluster_file import load_cluster
    from xpupool.server import admin_token
    from xpupool.server.datadir import DataDirError, check_writable, open_pool
    from xpupool.server.health import store_failure
    from xpupool.server.services import fleet
    from xpupool.server.services.stored_jobs import settle_stored_jobs

    try:
        for where in (cfg.data, *((cfg.logs,) if cfg.logs is not None else ())):
            check_writable(where)
            make_private(where)  # a data dir from a release that made it world-readable
        url = store_url(cfg)
        pool = open_pool(
            cfg.data, url, reinitialise=cfg.reinitialise, owner=owner, logs_root=cfg.logs
        )
        plane = ControlPlane(
            url,
            cfg.data,
            profile=cfg.profile,
            profiles={p.name: p for p in cfg.profiles},
            heartbeat_s=cfg.heartbeat_s,
            lost_after_s=cfg.lost_after_s,
            lease_s=cfg.lease_s,
            max_log_bytes=parse_memory_mib("--log-cap", cfg.log_cap) << 20,
            logs_dir=logs_root(cfg) / "logs",
            log_reserve_bytes=parse_memory_mib("--log-reserve", cfg.log_reserve) << 20,
            retention=cfg.retention,
            audit_keep=cfg.audit_keep,
            history_interval_s=cfg.history_interval_s,
            image_catalog=(
                None
                if cfg.catalog is None
                else default_image_catalog().with_rules_first(cfg.catalog.images)
            ),
            ownership=owner,
            sites=build_sites(cfg),
            secret_key_file=cfg.secret_key_file,
            model_cache=cfg.model_cache,
        )
        plane.card_health.settle_s = cfg.card_settle_s
        plane.site_network = cfg.site_network
        plane.meter.keep_s = cfg.usage_retention_s  # usage kept apart from jobs (usage/meter.py)
        plane.meter.every_s = cfg.usage_interval_s
        plane.max_grace_s = cfg.max_grace_s
        plane.card_idle.min_idle_s = cfg.recut_min_idle_s
        if cfg.fair_share_half_life_s is not None:  # the order by usage over a decaying window
            plane.use_fair_share_history(cfg.fair_share_half_life_s)
        if cfg.defrag is not None:  # movable work moved so that a job fitting nowhere fits
            defrag_moves.use(plane, cfg.defrag, cfg.defrag_min_cards)
            if cfg.consolidate is not None:  # and in quiet periods, before a large job asks
                consolidation_moves.use(plane, cfg.consolidate)
        if cfg.move_faster is not None:  # running jobs moved to faster cards as they free up
            faster_moves.use(plane, cfg.move_faster)
        if cfg.catalog is not None and cfg.catalog.accelerators:
            plane.meter.power = PowerModel(overrides=cfg.catalog.accelerators)
            plane.use_power(plane.meter.power)  # the energy scorer's figures from the start
        plane.before_job_id = pool.reserve
        if cfg.admin_token_file is not None:
            admin_token.adopt(plane, cfg.data, cfg.admin_token_file)
        elif cfg.rotate_admin_token:
            admin_token.rotate(plane, cfg.data)
            log.warning(
                "admin token rotated: %s (earlier admin tokens revoked)",
                admin_token_path(cfg.data),
            )
        else:
            warning = admin_token.ensure(plane, cfg.data)
            if warning:
                log.warning("%s", warning)
        if cfg.cluster is not None:
            fleet.register_many(plane, load_cluster(cfg.cluster), source="cluster")
        settle_stored_jobs(plane)  # what an older release stored that this one refuses
        plane.verdicts.warm()  # the empty twin the first submission would build (issue 25)
    except (OperationalError, OSError) as exc:
        raise DataDirError(f"cannot start on {cfg.data}: {store_failure(exc)}") from None
    except DatabaseError as exc:  # not OperationalError: the file is not a database we can read
        where = cfg.db or str(cfg.data / "state.db")
        raise DataDirError(
            f"{where} is not a readable database ({exc.orig}): restore it from a backup, or move"
            " it (with its -wal and -shm files) out of the way and start with --reinitialise:"
            " an empty pool whose job ids continue above the old ones"
        ) from None
    return plane


def logs_root(cfg: UpConfig) -> Path:
    """Where the replicas' logs (``logs/``) and the in-process agent's files (``agent/``) go."""
    return cfg.logs or cfg.data


def store_url(cfg: UpConfig) -> str:
    """``--db``, or ``DATA/state.db``."""
    return cfg.db or f"sqlite:///{(cfg.data / 'state.db').resolve()}"


def serve(cfg: UpConfig, echo: Callable[[str], None]) -> None:
    """Lock the data dir, claim the store, serve until stopped, then release both."""
    from xpupool.agent.launch.dirlock import DirLock
    from xpupool.agent.launch.guard import protect_process

    configure_logging(cfg.verbose)
    protect_process()  # umask 077 before the first file; not dumpable: jobs cannot read us
    lock = DirLock(cfg.data, "xpupool up").acquire()  # before anything in it is read or written
    owner = StoreOwnership(
        store_url(cfg), Identity.here(cfg.data), lease_s=cfg.store_lease_s, dir_locked=lock.held
    )
    try:
        if cfg.standby:
            from xpupool.server.standby import wait_for_store

            wait_for_store(
                owner, cfg.host, cfg.port, echo, tls=cfg.tls, prepare=lambda: prepare_start(cfg)
            )
        plane = open_plane(cfg, owner)
    except BaseException:
        owner.release()  # a start refused after the claim leaves the store free at once
        raise
    active = plane.sites.active()
    try:
        for site in active:  # its watches register its nodes and report its pods from now on
            site.attach(plane)
        _serve(cfg, plane, echo, owner.release)
    finally:
        for site in active:
            site.detach()
        owner.release()  # if the app did not (a failed start); a crash leaves the lease to end
        lock.release()


def prepare_start(cfg: UpConfig) -> None:
    """The start's work that needs no store, done ahead by a standby while it waits
    (``server/standby.py``): the app's and uvicorn's imports, and the engine's compiled loops
    with a rehearsal of the plane's profile (``rehearsal.warm``, seconds of CPU on a first
    start); after the take-over, only the store's reads remain before serving, and the
    rehearsal of a profile only its queues name (the store has them)."""
    import uvicorn  # noqa: F401

    from xpupool.engine import BUILTIN_PROFILES
    from xpupool.engine.fragmentation import kernels
    from xpupool.server import app, rehearsal  # noqa: F401

    profiles = {**BUILTIN_PROFILES, **{p.name: p for p in cfg.profiles}}  # as the plane's
    rehearsal.warm((cfg.profile,), profiles)
    kernels.warm_solver()
    freeze_start_heap()  # what is alive now: the start's own freeze then walks the plane's alone


def _serve(
    cfg: UpConfig, plane: ControlPlane, echo: Callable[[str], None], release: Callable[[], None]
) -> None:
    """Serve ``plane`` until stopped; ``release`` (the store) once the app has stopped: uvicorn
    ends the process by the signal it caught, so code after ``uvicorn.run`` may never run."""
    import uvicorn

    from xpupool.server.app import create_app

    token_file = admin_token_path(cfg.data)
    echo(f"admin token: {token_file} ({'mode 0600' if token_file.exists() else 'missing'})")
    echo(f"state: {plane.db.url.render_as_string(hide_password=True)}")
    if cfg.logs is not None:
        echo(f"logs: {cfg.logs} (logs/, agent/)")
    echo(f"nodes: {len(plane.node_records)}, devices: {plane.cluster_state.n_devices}")
    if cfg.catalog is not None:
        echo(f"catalog: {cfg.catalog.path} ({len(cfg.catalog.images)} image rules, tried first)")
    if cfg.model_cache is not None:
        echo(model_cache_line(plane, cfg.model_cache))
    scheme = "https" if cfg.tls_cert is not None else "http"
    base = f"{scheme}://{cfg.host}:{cfg.port}"
    echo(f"dashboard: {base}/  API: {base}/v1  docs: {base}/docs")
    warning = plain_http_warning(cfg.host, tls=cfg.tls_cert is not None)
    if warning:
        echo(warning)
    on_start: Callable[[], None] | None = None
    on_stop: Callable[[], None] | None = None
    if cfg.agent:
        from xpupool.agent.launch import LaunchSettings
        from xpupool.agent.launch.identity import isolation_notice
        from xpupool.server.inprocess_agent import AgentThread, local_agent

        settings = cfg.launch() if cfg.launch is not None else LaunchSettings()
        agent = AgentThread(local_agent(plane, logs_root(cfg) / "agent", settings=settings))
        plane.logs.on_forget.append(agent.agent.forget_copies)  # retention takes its copies too
        on_start, on_stop = agent.start, agent.stop
        echo(f"agent: in-process, hosting {', '.join(n.name for n in agent.agent.nodes)}")
        echo(f"jobs: {settings.describe()}")
        notice = isolation_notice(settings.sandbox)
        if notice:
            echo(f"warning: {notice}")
    limiter = RateLimiter(plane, cfg.rate_limit, cfg.address_rate_limit)
    echo(f"limits: {limits_line(cfg)}")
    if cfg.metrics_auth == "open":
        echo("warning: /metrics is open to anyone who reaches the port (--metrics-auth open)")
    channel: ProxyChannel | None = None
    tls = cfg.tls
    if cfg.proxy_port is not None:
        from xpupool.server.front.proxy_main import ProxyProcess

        proxy_listening = listen(cfg.host, cfg.proxy_port)
        sockets = PlaneSockets.create()
        channel = ProxyChannel(plane, sockets.channel, cfg.max_body)
        proxy = ProxyProcess(proxy_listening, sockets, tls, cfg.connections)
        on_start, on_stop = _with_proxy(proxy, on_start, on_stop)
        port = proxy_listening.getsockname()[1]
        proxy_scheme = "http" if tls is None else "https"
        echo(
            f"service proxy: {proxy_scheme}://{cfg.host}:{port}/v1/services/NAME/proxy/"
            " (own process)"
        )
    app = create_app(
        plane,
        on_start=on_start,
        on_stop=on_stop,
        on_stopped=release,
        max_body=cfg.max_body,
        channel=channel,
        limiter=limiter,
        metrics_auth=cfg.metrics_auth,
    )
    freeze_start_heap()
    gc.enable()  # off while the server started (cli_up.py): collected as usual from here on
    survivors = SurvivorFreeze(quiet=no_job_since_asked(plane))
    survivors.start()
    solver_when_quiet(no_job_since_asked(plane))
    try:
        uvicorn.run(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level="warning",
            access_log=False,
            ssl_certfile=None if cfg.tls_cert is None else str(cfg.tls_cert),
            ssl_keyfile=None if cfg.tls_key is None else str(cfg.tls_key),
            http=guarded_protocol(cfg.connections),
        )
    finally:
        survivors.stop()


def limits_line(cfg: UpConfig) -> str:
    """What a client may take, as the start-up output says it."""
    per_address = cfg.connections.per_address or "no limit"
    return (
        f"{cfg.rate_limit} per token, {cfg.address_rate_limit} per address without one; "
        f"{per_address} connections per address, headers within "
        f"{cfg.connections.header_timeout_s:g} s; /metrics: {cfg.metrics_auth}"
    )


def _with_proxy(
    proxy: ProxyProcess,
    on_start: Callable[[], None] | None,
    on_stop: Callable[[], None] | None,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The app's start and stop hooks with the proxy process's: started last (the channel
    listens by then), stopped first."""

    def start() -> None:
        if on_start is not None:
            on_start()
        proxy.start()

    def stop() -> None:
        proxy.stop()
        proxy.sockets.remove()  # here: uvicorn ends the process by the signal it caught
        if on_stop is not None:
            on_stop()

    return start, stop


def solver_when_quiet(quiet: Callable[[], bool]) -> threading.Thread:
    """Import the share prices' LP solver (``kernels.warm_solver``, SciPy: 0.4 CPU s) on a thread
    at the first check, one a second, that finds the server ``quiet``: beside the first
    placements, which seldom need it, it held the interpreter half the time
    (docs/benchmarks.md, start-up). A job that needs it sooner imports it itself."""

    def run() -> None:
        while True:
            time.sleep(QUIET_CHECK_S)
            if quiet():
                kernels.warm_solver()
                return

    thread = threading.Thread(target=run, name="xpupool-solver-import", daemon=True)
    thread.start()
    return thread


def no_job_since_asked(plane: ControlPlane) -> Callable[[], bool]:
    """Whether no job was submitted since the last time it was asked, and none waits to be
    placed: when the frozen heap's sweep may stop the server without a submission waiting for it
    (``heap_freeze``)."""
    last = plane.next_job_id

    def quiet() -> bool:
        nonlocal last
        seen, last = last, plane.next_job_id
        return seen == last and not plane.queued

    return quiet


def plain_http_warning(host: str, *, tls: bool) -> str | None:
    """One line when the API would go out in clear beyond this host (tokens, job env, logs);
    None on a loopback address or with TLS."""
    if tls or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass  # a host name other than localhost: it may well be reachable from elsewhere
    return (
        f"warning: plain HTTP on {host}: tokens, job env and logs cross the network in clear; "
        "give --tls-cert and --tls-key"
    )
