"""``xpupool k8s extender``: the cluster view (Node and Pod informers into one engine), the
namespaces' ResourceQuotas on card resources (a third informer), the verbs over them, and the HTTP
server kube-scheduler calls; until every informer has listed the cluster once, ``/readyz`` says so
and the verbs wait for it (a filter before that would see an empty pool, or no quota)."""

from __future__ import annotations

import logging
import ssl
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from xpupool.catalog.images import default_image_catalog
from xpupool.catalog.operator_file import OperatorCatalog
from xpupool.engine.link_domains import labelled
from xpupool.engine.profile import Profile
from xpupool.k8s.codec.node_lock import WAIT_S, LockMode, NodeLocks
from xpupool.k8s.codec.pod_assignment import assignment_annotations
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.k8s.extender.gang import (
    DEFAULT_WAIT_S,
    Gangs,
    PodGroupSizes,
    lightkube_podgroup_getter,
)
from xpupool.k8s.extender.http_app import ExtenderMetrics, create_app, readiness, serve_metrics
from xpupool.k8s.extender.learner import Learner
from xpupool.k8s.extender.pod_api import LightkubePodApi
from xpupool.k8s.extender.preemption import Preemptions
from xpupool.k8s.extender.verbs import Annotator, Extender
from xpupool.k8s.informers.cluster_view import ClusterView, NodeDecoder
from xpupool.k8s.informers.decoders import decode_node, decode_pod_devices
from xpupool.k8s.informers.kubeconfig import load_config, make_client
from xpupool.k8s.informers.leader import LeaderElector
from xpupool.k8s.informers.resource_quota import NamespaceQuotas
from xpupool.model.allocation import Allocation
from xpupool.model.device import Node

log = logging.getLogger("xpupool.k8s.extender")
FIELD_MANAGER = "xpupool-extender"


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    kubeconfig: str | None
    host: str
    port: int
    policy: str
    profiles: dict[str, Profile]
    metrics_host: str = ""
    metrics_port: int = 0
    metrics_token_file: Path | None = None  # a scrape's bearer token (agent/metrics.py)
    sync_timeout_s: float = 120.0
    lease: tuple[str, str] | None = None  # (namespace, name): leader election on
    identity: str = ""  # this replica in the Lease (the pod's name)
    gang_wait_s: float = DEFAULT_WAIT_S
    link_domain_label: str | None = None  # a node label: a gang stays in one of its values
    choose: bool = True  # filter answers the engine's node (else every node that fits)
    preempt: bool = True  # evict lower-priority pods for card shares (preemption.py)
    image_needs: bool = False  # containers' images add software needs (pod_images.py)
    catalog: OperatorCatalog | None = None  # --catalog FILE: the site's image rules first
    node_lock: LockMode = LockMode.AUTO  # HAMi's node lock on nodes its device plugin runs on
    node_lock_wait_s: float = WAIT_S  # a bind's budget for a locked node, from its start
    tls_cert: str | None = None  # serve the verbs over HTTPS (with tls_key)
    tls_key: str | None = None
    client_ca: str | None = None  # require client certificates these CAs signed


def partition_annotator(view: ClusterView) -> Annotator:
    """What a bind writes, with the node's devices at hand, so that an allocated hardware
    partition is written as HAMi reserves one (``pod_assignment.py``)."""

    def annotate(node: str, demand: PodDemand, placed: Sequence[Allocation]) -> dict[str, str]:
        record = view.nodes().get(node)
        cards = () if record is None or record.node is None else record.node.devices
        devices = {d.uuid: d for d in cards if d.partition is not None}
        return assignment_annotations(node, demand, placed, devices=devices)

    return annotate


def domain_decoder(label: str | None) -> NodeDecoder:
    """``decode_node`` with each node in the link domain ``label`` names
    (``engine/link_domains.py``): a gang's placement (``Engine.place``, ``gang.py``) is then kept
    to one domain. None: ``decode_node`` itself, the cluster one domain."""
    if label is None:
        return decode_node

    def decode(obj: dict[str, Any]) -> Node | None:
        node = decode_node(obj)
        return None if node is None else labelled(node, label)

    return decode


def run(cfg: ExtenderConfig, stop: threading.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn's handlers) or ``stop``."""
    config = load_config(cfg.kubeconfig)
    view = ClusterView(
        domain_decoder(cfg.link_domain_label),
        decode_pod_devices,
        profile=cfg.policy,
        profiles=cfg.profiles or None,
        defer_learning=True,  # re-learned between verbs, by the learner below
    )
    client = make_client(config, field_manager=FIELD_MANAGER)
    sizes = PodGroupSizes(lightkube_podgroup_getter(client))
    gangs = Gangs(view, sizes=sizes, wait_s=cfg.gang_wait_s)
    api = LightkubePodApi(client)
    preemptions = Preemptions(view, api) if cfg.preempt else None
    images = None
    if cfg.image_needs:
        images = default_image_catalog()
        if cfg.catalog is not None:
            images = images.with_rules_first(cfg.catalog.images)
    locks = NodeLocks(api, cfg.node_lock, wait_s=cfg.node_lock_wait_s)
    quotas = NamespaceQuotas()
    view.node_seen = locks.node_changed  # a bind waiting for a node's lock hears of its release
    extender = Extender(
        view,
        api,
        partition_annotator(view),
        gangs,
        choose=cfg.choose,
        preemptions=preemptions,
        images=images,
        locks=locks,
        quotas=quotas,
    )
    registry = CollectorRegistry()
    metrics = ExtenderMetrics(registry)
    view.watch(config)
    quotas.watch(config)
    learner = Learner(view).start()
    elector = None
    if cfg.lease is not None:
        namespace, name = cfg.lease
        elector = LeaderElector(config, name=name, namespace=namespace, identity=cfg.identity)
        elector.start()
    leading = None if elector is None else (lambda: elector.is_leader)

    def synced(timeout_s: float) -> bool:
        return quotas.wait_synced(timeout_s) and view.wait_synced(timeout_s)

    app = create_app(extender, synced, metrics, leading)
    probes = None
    if cfg.metrics_port:  # /metrics, and /healthz and /readyz for a kubelet (no client cert)
        ready = lambda: readiness(synced, leading)  # noqa: E731
        probes = serve_metrics(
            registry, cfg.metrics_host, cfg.metrics_port, ready, cfg.metrics_token_file
        )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level="warning",
            access_log=False,
            ssl_certfile=cfg.tls_cert,
            ssl_keyfile=cfg.tls_key,
            ssl_ca_certs=cfg.client_ca,
            ssl_cert_reqs=ssl.CERT_NONE if cfg.client_ca is None else ssl.CERT_REQUIRED,
        )
    )
    if stop is not None:

        def _watch_stop() -> None:
            stop.wait()
            server.should_exit = True

        threading.Thread(target=_watch_stop, daemon=True).start()
    # A verb hops from the event loop to a worker thread and back while the informers' threads
    # decode watch events: with CPython's default 5 ms switch interval each hop could wait that
    # long for the GIL, on every call kube-scheduler makes in its one scheduling loop.
    sys.setswitchinterval(0.001)
    scheme = "http" if cfg.tls_cert is None else "https"
    clients = "any client" if cfg.client_ca is None else "clients with a certificate of --client-ca"
    log.info(
        "extender on %s://%s:%d for %s, profile %s", scheme, cfg.host, cfg.port, clients, cfg.policy
    )
    try:
        server.run()
    finally:
        if elector is not None:
            elector.stop()  # the Lease given up: a standby takes over at once
        learner.stop()
        quotas.stop()
        view.stop()
        client.close()
        if probes is not None:
            probes.stop()
