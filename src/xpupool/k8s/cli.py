"""``xpupool k8s ...``: the Kubernetes front's processes (the node agent DaemonSet's command).

Heavy imports (lightkube, the probes) happen inside each command, so ``xpupool --help`` and the
client commands stay light.
"""

from __future__ import annotations

import logging
import re
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import click

from xpupool.start_options import catalog_option, check_policies, load_catalog, load_profiles

# A Node name is a DNS-1123 subdomain (apimachinery pkg/util/validation IsDNS1123Subdomain).
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def _node_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if len(value) > 253 or not _NODE_NAME.match(value):
        raise click.BadParameter(
            f"{value[:80]!r} is not a Node name (lower-case DNS subdomain, at most 253 characters)"
        )
    return value


def _listen(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) -> (host, port); None -> off (port 0)."""
    if value is None:
        return ("", 0)
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r}: expected HOST:PORT such as 127.0.0.1:9400")
    return (host, int(port))


@click.group("k8s")
def k8s() -> None:
    """The Kubernetes front: the scheduler extender and the node agent."""


@k8s.command("agent")
@click.option(
    "--node-name",
    required=True,
    envvar="NODE_NAME",
    callback=_node_name,
    help="The Node this agent writes (in a DaemonSet: spec.nodeName from the downward API, as "
    "NODE_NAME)",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    help="Kubeconfig file [default: the pod's in-cluster service account]",
)
@click.option(
    "--interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.1, max=3600),
    help="Seconds between passes (probe, heartbeat, patch what changed)",
)
@click.option(
    "--metrics",
    "metrics_at",
    callback=_listen,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics [default: off]",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding a token a scrape must send as 'Authorization: Bearer' (read at each "
    "scrape: a rotated Secret takes effect at once) [default: the metrics are open]",
)
@click.option(
    "--fake",
    "fake_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Devices from a fake-probe YAML file instead of the vendor probes",
)
@click.option(
    "--hami-register/--no-hami-register",
    default=False,
    show_default=True,
    help="Also write HAMi's node register annotations (hami.io/node-nvidia-register and the "
    "other types HAMi reads from an annotation) for the cards found",
)
def agent(
    node_name: str,
    kubeconfig: str | None,
    interval: float,
    metrics_at: tuple[str, int],
    metrics_token_file: Path | None,
    fake_path: str | None,
    hami_register: bool,
) -> None:
    """Probe this node's accelerators and keep them, with a heartbeat, in its Node annotations."""
    import yaml
    from lightkube import Client, KubeConfig
    from lightkube.core.exceptions import ConfigError

    from xpupool.agent.metrics import serve_registry
    from xpupool.agent.monitor import Monitor
    from xpupool.k8s.node_agent.agent import (
        FIELD_MANAGER,
        ExtraAnnotations,
        NodeAgent,
        make_registry,
    )
    from xpupool.probes import FakeProbe, Probe, host_probes

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    extra: ExtraAnnotations | None = None
    extra_keys: frozenset[str] = frozenset()
    if hami_register:
        # HAMi's register annotations beside ours; the admission policy allows exactly
        # hami_register.REGISTER_KEYS, and the agent owns them (a stale one is deleted).
        from xpupool.k8s.node_agent.hami_register import REGISTER_KEYS, hami_register_annotations

        extra, extra_keys = hami_register_annotations, REGISTER_KEYS
    try:
        config = (
            KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
        )
    except (ConfigError, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        # KeyError: a key missing in the file, or no KUBERNETES_SERVICE_HOST outside a pod
        why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        where = kubeconfig or "the in-cluster service account"
        raise click.ClickException(f"cannot load {where}: {why}") from None
    client = Client(config, field_manager=FIELD_MANAGER)
    probes: list[Probe] = [FakeProbe(fake_path)] if fake_path else host_probes()
    node_agent = NodeAgent(client, node_name, Monitor(probes), extra=extra, extra_keys=extra_keys)
    stop = threading.Event()

    def _stop(signum: int, _: FrameType | None) -> None:
        logging.getLogger("xpupool.k8s.agent").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    metrics = None
    host, port = metrics_at
    if port:
        try:
            metrics = serve_registry(make_registry(node_agent), host, port, metrics_token_file)
        except OSError as exc:
            client.close()
            raise click.ClickException(f"metrics port {host}:{port}: {exc}") from None
        click.echo(f"metrics at http://{host}:{metrics.port}/metrics")
    click.echo(f"node agent for Node {node_name}, a pass every {interval:g}s", err=True)
    try:
        node_agent.run(stop, interval)
    finally:
        if metrics is not None:
            metrics.stop()
        client.close()
    click.echo("stopped", err=True)


@k8s.command("extender")
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    help="Kubeconfig file [default: in-cluster service account, then $KUBECONFIG]",
)
@click.option(
    "--listen",
    default="127.0.0.1:8888",
    show_default=True,
    callback=_listen,
    help="Serve the verbs (POST /filter, /prioritize, /bind, /preempt) at HOST:PORT",
)
@click.option(
    "--policy",
    default=None,
    help="Built-in profile or one from --profile [default: xpupool's default]",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Profiles file (KubeSchedulerConfiguration-shaped, see docs/profiles.md)",
)
@click.option(
    "--metrics",
    "metrics_at",
    callback=_listen,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics [default: off]",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding a token a scrape must send as 'Authorization: Bearer' (read at each "
    "scrape: a rotated Secret takes effect at once) [default: the metrics are open]",
)
@click.option(
    "--leader-elect",
    "lease",
    default=None,
    metavar="NAMESPACE/NAME",
    help="Run as one of several replicas: only the holder of this Lease answers and is ready "
    "(for an extender behind a Service; beside kube-scheduler in one pod, its own Lease suffices)",
)
@click.option(
    "--identity",
    envvar="POD_NAME",
    default=None,
    help="This replica's name in the Lease [default: $POD_NAME, else the host name]",
)
@click.option(
    "--gang-wait",
    type=click.FloatRange(min=0.1, max=600),
    default=25.0,
    show_default=True,
    help="Seconds a gang member's bind waits for the rest of its group; keep it under "
    "kube-scheduler's httpTimeout for the extender",
)
@click.option(
    "--link-domain-label",
    default=None,
    metavar="LABEL",
    help="A node label whose value is the node's link domain (topology.kubernetes.io/zone, a "
    "network block): a gang's pods are all placed in one [default: the cluster is one domain]",
)
@click.option(
    "--filter-all",
    is_flag=True,
    help="filter answers every node that fits and lets kube-scheduler's scoring (with "
    "prioritize) choose [default: the node the engine would choose, as HAMi's filter does]",
)
@click.option(
    "--no-preemption",
    is_flag=True,
    help="never evict lower-priority pods for a pod short of card shares [default: evict the "
    "fewest the engine's planner names, through the Eviction API]",
)
@click.option(
    "--image-needs",
    is_flag=True,
    help="read software needs from containers' images: an image the catalog knows (e.g. "
    "pytorch/pytorch:2.4.0-cuda12.4-...) asks for a driver that serves it. Needs nodes whose "
    "driver is known (xpupool's node agent reports it; HAMi's register annotation does not, "
    "and such a pod would wait there) [default: off]",
)
@click.option(
    "--hami-node-lock",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Take HAMi's node lock (hami.io/mutex.lock) around each bind, as HAMi's scheduler does, "
    "so HAMi's device plugin serves each pod its own cards: auto on nodes with a HAMi "
    "registration annotation, on for every node, off for none (no HAMi device plugin)",
)
@click.option(
    "--hami-node-lock-wait",
    type=click.FloatRange(min=0, max=600),
    default=25.0,
    show_default=True,
    help="Seconds a bind (counted from its start) waits for another pod's lock on its node "
    "before answering Error; keep it under kube-scheduler's httpTimeout for the extender",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM certificate (chain) to serve the verbs over HTTPS with (kube-scheduler's "
    "enableHTTPS); give --tls-key too",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM private key of --tls-cert",
)
@click.option(
    "--client-ca",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="PEM CA certificate(s): every connection must present a client certificate they "
    "signed (kube-scheduler's tlsConfig certFile and keyFile), else the TLS handshake fails; "
    "needs --tls-cert [default: no client authentication]",
)
@catalog_option
def extender(
    kubeconfig: str | None,
    listen: tuple[str, int],
    policy: str | None,
    profile_file: str | None,
    metrics_at: tuple[str, int],
    metrics_token_file: Path | None,
    lease: str | None,
    identity: str | None,
    gang_wait: float,
    link_domain_label: str | None,
    filter_all: bool,
    no_preemption: bool,
    image_needs: bool,
    hami_node_lock: str,
    hami_node_lock_wait: float,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    catalog_file: str | None,
) -> None:
    """kube-scheduler extender: place pods that ask for accelerators with xpupool's engine."""
    from xpupool.engine import DEFAULT_PROFILE
    from xpupool.k8s.codec.node_lock import LockMode
    from xpupool.k8s.extender.main import ExtenderConfig, run

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    if client_ca is not None and tls_cert is None:
        raise click.UsageError("--client-ca needs --tls-cert and --tls-key: it is TLS client auth")
    profiles = load_profiles(profile_file)
    name = policy or (next(iter(profiles)) if profiles else DEFAULT_PROFILE)
    check_policies([name], profiles)
    if link_domain_label is not None:
        from xpupool.model.errors import RequestError
        from xpupool.model.taint import check_key

        try:
            check_key("--link-domain-label", link_domain_label)
        except RequestError as exc:
            raise click.BadParameter(exc.reason, param_hint="--link-domain-label") from None
    host, port = listen
    where: tuple[str, str] | None = None
    if lease is not None:
        namespace, sep, lease_name = lease.partition("/")
        if not sep or not namespace or not lease_name or "/" in lease_name:
            raise click.BadParameter(
                f"{lease!r}: expected NAMESPACE/NAME", param_hint="--leader-elect"
            )
        where = (namespace, lease_name)
    run(
        ExtenderConfig(
            kubeconfig=kubeconfig,
            host=host,
            port=port,
            policy=name,
            profiles=profiles,
            metrics_host=metrics_at[0],
            metrics_port=metrics_at[1],
            metrics_token_file=metrics_token_file,
            lease=where,
            identity=identity or socket.gethostname(),
            gang_wait_s=gang_wait,
            link_domain_label=link_domain_label,
            choose=not filter_all,
            preempt=not no_preemption,
            image_needs=image_needs,
            catalog=load_catalog(catalog_file),
            node_lock=LockMode(hami_node_lock),
            node_lock_wait_s=hami_node_lock_wait,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_ca=client_ca,
        )
    )
