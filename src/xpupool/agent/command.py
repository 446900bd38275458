"""``xpupool agent``: the node agent as its own process, talking to a server over HTTP."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType

import click


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{text!r}: expected KEY=VALUE", param_hint="--label")
        out[key] = value
    return out


@click.command("agent")
@click.option("--server", required=True, help="Control plane URL, e.g. http://10.0.0.1:8080")
@click.option(
    "--token",
    envvar="XPUPOOL_TOKEN",
    required=True,
    help="Agent (or admin) token; also read from XPUPOOL_TOKEN (never passed to jobs).",
)
@click.option("--node", help="Node name [default: this host's name]")
@click.option("--site", default="default", show_default=True)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE node label (repeatable)")
@click.option(
    "--fake",
    "fake_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Devices from a fake-probe YAML file instead of the vendor probes",
)
@click.option(
    "--grace", default=10.0, show_default=True, help="Seconds from SIGTERM to SIGKILL on stop"
)
@click.option(
    "--work-dir",
    default=".xpupool-agent",
    show_default=True,
    type=click.Path(file_okay=False),
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
def agent_command(
    server: str,
    token: str,
    node: str | None,
    site: str,
    labels: tuple[str, ...],
    fake_path: str | None,
    grace: float,
    work_dir: str,
    poll: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Run this host's node agent: register, heartbeat, run and stop assigned work."""
    from xpupool.agent.agent import Agent, HostedNode
    from xpupool.agent.inventory import node_in, node_name
    from xpupool.agent.monitor import Monitor
    from xpupool.agent.runner import Runner
    from xpupool.agent.transport import HttpTransport
    from xpupool.probes import FakeProbe, Probe, host_probes

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    name = node_name(node)
    node_labels = _labels(labels)
    probes: list[Probe] = [FakeProbe(fake_path)] if fake_path else host_probes()
    hosted = HostedNode(
        name=name,
        runner=Runner(name, Path(work_dir) / name, grace_s=grace),
        monitor=Monitor(probes),
        inventory=lambda devices: node_in(name, devices, site=site, labels=node_labels),
    )
    transport = HttpTransport(server, token)
    stop = threading.Event()

    def _stop(signum: int, _: FrameType | None) -> None:
        logging.getLogger("xpupool.agent").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    click.echo(f"agent for node {name} -> {server}")
    agent = Agent(transport, [hosted], poll_s=poll)
    metrics = None
    if metrics_port:
        from xpupool.agent.metrics import serve_metrics

        try:
            metrics = serve_metrics(agent, metrics_host, metrics_port)
        except OSError as exc:
            transport.close()
            raise click.ClickException(
                f"metrics port {metrics_host}:{metrics_port}: {exc}"
            ) from exc
        click.echo(f"metrics at http://{metrics_host}:{metrics.port}/metrics")
    try:
        agent.run(stop)
    finally:
        if metrics is not None:
            metrics.stop()
        transport.close()
