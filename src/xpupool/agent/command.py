"""``xpupool agent``: the node agent as its own process, talking to a server over HTTP."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from xpupool.agent.launch.options import launch_options, launch_settings
from xpupool.agent.launch.ports import DEFAULT_PORTS
from xpupool.log_setup import configure_logging, verbose_option
from xpupool.probes.container_runtime import RuntimeChoice
from xpupool.server.schemas.agent_protocol import ADDRESS_LABEL, PORTS_LABEL

if TYPE_CHECKING:
    from xpupool.server.schemas.agent_protocol import TaintIn


def _token(token: str | None, token_file: str | None) -> str:
    """The token from ``--token-file``, else ``--token``/XPUPOOL_TOKEN (warning when it came on
    the command line, where every user of the host can read it in ps)."""
    from xpupool.agent.launch.guard import read_token_file

    if token_file:
        try:
            return read_token_file(Path(token_file))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--token-file") from None
    if not token:
        raise click.UsageError("give --token-file FILE (or XPUPOOL_TOKEN)")
    source = click.get_current_context().get_parameter_source("token")
    if source is click.core.ParameterSource.COMMANDLINE:
        logging.getLogger("xpupool.agent").warning(
            "--token on the command line is visible to every user in ps: use --token-file"
        )
    return token


def _servers(text: str) -> list[str]:
    """``--server``'s URLs: one, or several comma-separated (a plane and its standbys); each an
    http(s) URL with a host, checked before anything starts."""
    out = []
    for url in (part.strip() for part in text.split(",")):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise click.BadParameter(
                f"{url!r}: expected an http:// or https:// URL with a host", param_hint="--server"
            )
        out.append(url)
    return out


def _route_address(server: str) -> str:
    """This host's address on the route to ``server`` (a UDP connect sends nothing)."""
    parts = urlsplit(server)
    host = parts.hostname or "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, parts.port or 80))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _taints(values: tuple[str, ...]) -> list[TaintIn]:
    """``--taint`` values as registration taints; a bad one is a usage error naming it."""
    from xpupool.model.errors import RequestError
    from xpupool.model.taint import check_taints, read_taint
    from xpupool.server.schemas.agent_protocol import TaintIn

    taints = []
    for text in values:
        try:
            taints.append(read_taint("--taint", text))
            check_taints("--taint", taints)
        except RequestError as exc:
            raise click.BadParameter(f"{text!r}: {exc.reason}", param_hint="--taint") from None
    return [TaintIn.from_taint(t) for t in taints]


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{text!r}: expected KEY=VALUE", param_hint="--label")
        out[key] = value
    return out


@click.command("agent")
@click.option(
    "--server",
    required=True,
    help="Control plane URL, e.g. http://10.0.0.1:8080; or several, comma-separated: an active"
    " plane and its standbys on one store, tried in turn (docs/postgresql.md)",
)
@click.option(
    "--token",
    envvar="XPUPOOL_TOKEN",
    help="Agent (or admin) token; also read from XPUPOOL_TOKEN (never passed to jobs). On the"
    " command line it is visible in ps: prefer --token-file.",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="File whose first line is the agent token (mode 0600)",
)
@click.option(
    "--ca",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM file of the CA that signed the server's TLS certificate [default: system CAs]",
)
@click.option("--node", help="Node name [default: this host's name]")
@click.option("--site", default="default", show_default=True)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE node label (repeatable)")
@click.option(
    "--taint",
    "taints",
    multiple=True,
    metavar="KEY[=VALUE]:EFFECT",
    help="Taint the node registers with (repeatable), as kubelet's --register-with-taints: "
    "NoSchedule keeps off work that does not tolerate it, PreferNoSchedule makes other nodes "
    "preferred. Taken when the node first registers; afterwards `xpupool node taint` changes "
    "its taints",
)
@click.option(
    "--address",
    help="Address the replicas of a distributed job reach this node at (MASTER_ADDR) "
    "[default: this host's address on the route to the server]",
)
@click.option(
    "--fake",
    "fake_path",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="Devices from a fake-probe YAML file instead of the vendor probes",
)
@click.option(
    "--grace", default=10.0, show_default=True, help="Seconds from SIGTERM to SIGKILL on stop"
)
@click.option(
    "--work-dir",
    default=".xpupool-agent",
    show_default=True,
    type=click.Path(file_okay=False, resolve_path=True),
    help="Replica logs and working directories",
)
@click.option("--poll", default=0.2, show_default=True, help="Process poll period, s")
@click.option(
    "--metrics-port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics at http://HOST:PORT/metrics; 0: off",
)
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True, help="Address the metrics port binds"
)
@click.option(
    "--metrics-token-file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="A file holding a token a scrape must send as 'Authorization: Bearer' (read at each "
    "scrape) [default: the metrics are open to whoever reaches the port]",
)
@click.option(
    "--drain/--no-drain",
    default=False,
    show_default=True,
    help="When a device that jobs hold disappears or shrinks: ask the server to cordon it and "
    "drop or change it once they end (--no-drain: the server refuses the new inventory, naming "
    "the jobs, and keeps serving the last one)",
)
@click.option(
    "--ports",
    default=DEFAULT_PORTS,
    show_default=True,
    metavar="FIRST-LAST",
    help="Host ports image replicas are given (PORT, XPUPOOL_PORTS; a gang's MASTER_PORT on"
    " this node), one per live replica, published under --network bridge; declared to the"
    " server (the xpupool/ports label), which picks a gang's master port from it.",
)
@click.option(
    "--health-warning",
    "health_warnings",
    multiple=True,
    metavar="CAUSE",
    help="A health cause to keep as a warning (repeatable): a kind such as ecc-uncorrectable "
    "or xid-94, or an XID number. A card with it is reported healthy with the cause: shown and "
    "counted, its jobs left running. Application XIDs (13, 31, 43, 45, 68) and corrected or "
    "contained ECC XIDs (63, 92, 94) are warnings already (docs/agent.md#card-health)",
)
@click.option(
    "--share-grace",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds a replica may use more device memory than its share (beyond "
    "--share-tolerance) before it is stopped, where the vendor reports memory per process",
)
@click.option(
    "--share-tolerance",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Percent of its share a replica may use beyond it without being stopped",
)
@click.option(
    "--share-stop/--no-share-stop",
    default=True,
    show_default=True,
    help="Stop a replica over its device memory share (--no-share-stop: only flag it)",
)
@click.option(
    "--unmeasured-passes",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Passes in a row a replica's process rows may go unchecked (more open files than the"
    " agent checks) before the job is told, and with --unmeasured-stop the replica stopped",
)
@click.option(
    "--unmeasured-stop/--no-unmeasured-stop",
    default=False,
    show_default=True,
    help="Stop a replica whose device memory could not be measured for --unmeasured-passes"
    " passes in a row (default: only tell the job)",
)
@launch_options
@verbose_option
def agent_command(
    server: str,
    token: str | None,
    token_file: str | None,
    ca: str | None,
    node: str | None,
    site: str,
    labels: tuple[str, ...],
    taints: tuple[str, ...],
    address: str | None,
    fake_path: str | None,
    grace: float,
    work_dir: str,
    poll: float,
    metrics_port: int,
    metrics_host: str,
    metrics_token_file: str | None,
    drain: bool,
    job_uid_range: str,
    job_root: str | None,
    log_cap: str,
    log_reserve: str,
    sandbox: str,
    runtime: RuntimeChoice,
    device_root: str,
    pids_limit: int,
    network: str,
    allow_network: tuple[str, ...],
    pull_timeout: float,
    hami_core: str | None,
    mps: bool,
    ports: str,
    health_warnings: tuple[str, ...],
    share_grace: float,
    share_tolerance: float,
    share_stop: bool,
    unmeasured_passes: int,
    unmeasured_stop: bool,
    verbose: bool,
) -> None:
    """Run this host's node agent: register, heartbeat, run and stop assigned work."""
    from xpupool.agent.agent import Agent, HostedNode
    from xpupool.agent.inventory import node_in, node_name
    from xpupool.agent.launch.dirlock import DirLock
    from xpupool.agent.launch.guard import make_private, protect_process
    from xpupool.agent.launch.identity import isolation_notice
    from xpupool.agent.monitor import Monitor
    from xpupool.agent.node_token import NODE_TOKEN_FILE, NodeTokenFile
    from xpupool.agent.recut import Recuts, chip_locator
    from xpupool.agent.runner import Runner
    from xpupool.agent.share_watch import ShareWatch
    from xpupool.agent.transport import AgentRefused, HttpTransport
    from xpupool.agent.unmeasured import UnmeasuredWatch
    from xpupool.probes import FakeProbe, Probe, host_probes

    servers = _servers(server)
    configure_logging(verbose)
    protect_process()  # before anything is created or the token is read
    DirLock(Path(work_dir), "xpupool agent").acquire()  # one agent per work dir, held to the end
    token = _token(token, token_file)
    os.environ.pop("XPUPOOL_TOKEN", None)  # not for the vendor tools the probes run either
    private = (Path(work_dir), *((Path(token_file),) if token_file else ()))
    settings = launch_settings(
        job_uid_range,
        job_root,
        log_cap,
        sandbox,
        runtime,
        device_root,
        private,
        pids_limit,
        log_reserve=log_reserve,
        network=network,
        pull_timeout=pull_timeout,
        hami_core=hami_core,
        mps=mps,
        ports=ports,
        allow_network=allow_network,
    )
    make_private(Path(work_dir))
    name = node_name(node)
    node_labels = {
        ADDRESS_LABEL: address or _route_address(servers[0]),
        PORTS_LABEL: str(settings.ports),
        **_labels(labels),
    }
    node_taints = _taints(taints)
    probes: list[Probe] = [FakeProbe(fake_path)] if fake_path else host_probes()
    for probe in probes:  # NVML's XID events come from a thread of their own (probes/nvml_xid.py)
        watch = getattr(probe, "watch_xids", None)
        if watch is not None:
            watch(threading.Event())
    hosted = HostedNode(
        name=name,
        runner=Runner(name, Path(work_dir) / name, grace_s=grace, settings=settings),
        monitor=Monitor(
            probes,
            warnings=frozenset(w.strip().lower() for w in health_warnings),
            shares=ShareWatch(share_tolerance / 100, share_grace) if share_stop else None,
            unmeasured=UnmeasuredWatch(unmeasured_passes, unmeasured_stop),
            dev_root=settings.device_root,  # the nodes a card's processes must hold
        ),
        inventory=lambda devices: node_in(
            name,
            devices,
            site=site,
            labels=node_labels,
            taints=node_taints,
            runtime=settings.runtime,
            drain=drain,
        ),
        recuts=Recuts(chip_locator(probes)),
    )
    stored = NodeTokenFile(Path(work_dir) / NODE_TOKEN_FILE)
    token, why = stored.choose(token)
    if why:
        click.echo(why)
    transport = HttpTransport(servers, token, ca=ca, on_token=stored.save)
    stop = threading.Event()

    def _stop(signum: int, _: FrameType | None) -> None:
        logging.getLogger("xpupool.agent").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    click.echo(f"agent for node {name} -> {', '.join(servers)}")
    click.echo(f"jobs: {settings.describe()}")
    notice = isolation_notice(settings.sandbox)
    if notice:
        click.echo(f"warning: {notice}")
    agent = Agent(transport, [hosted], poll_s=poll)
    metrics = None
    if metrics_port:
        from xpupool.agent.metrics import serve_metrics

        try:
            scrape_token = None if metrics_token_file is None else Path(metrics_token_file)
            metrics = serve_metrics(agent, metrics_host, metrics_port, scrape_token)
        except OSError as exc:
            transport.close()
            raise click.ClickException(
                f"metrics port {metrics_host}:{metrics_port}: {exc}"
            ) from exc
        click.echo(f"metrics at http://{metrics_host}:{metrics.port}/metrics")
    try:
        agent.run(stop)
    except AgentRefused as exc:  # retrying cannot help: say why once and exit non-zero
        raise click.ClickException(str(exc)) from None
    finally:
        if metrics is not None:
            metrics.stop()
        transport.close()
