"""Where the plane reaches each node's xpupool node agent on a Kubernetes site, for its metrics
(``node_power.py``): with ``node_metrics.service``, the ready endpoints of the agents' Service
in its EndpointSlices, by the node each runs on.

The chart's agent DaemonSet listens on its pod's IP, behind a headless Service
(``deploy/helm``): a node's name reaches no agent unless the operator adds a hostPort or
per-node DNS, while the Service's slices name every ready agent pod's address and node. They are
watched by the site's informer machinery (``k8s/informers/watch.py``), selected by the Service's
label (``kubernetes.io/service-name``) and namespace, read by the services' reader
(``endpoint_slices.read_slice``: a hostile slice is dropped whole) into the services' book
(``SliceBook``). An endpoint on a node that is not the site's is never asked for; a node with
no ready endpoint has no URL (its round skips it).
"""

from __future__ import annotations

import ipaddress
from functools import partial

from lightkube.config.kubeconfig import SingleConfig

from xpupool.k8s.informers.watch import Informer
from xpupool.k8s.site.endpoint_slices import SERVICE_NAME, SliceBook, SliceEndpoints, read_slice
from xpupool.k8s.site.site_services import RawEndpointSlice

__all__ = ["AgentEndpoints", "metrics_url"]


def metrics_url(host: str, port: int) -> str:
    """The node agent's metrics URL at ``host`` (an IP address; IPv6 bracketed)."""
    if ipaddress.ip_address(host).version == 6:
        host = f"[{host}]"
    return f"http://{host}:{port}/metrics"


class AgentEndpoints:
    """The agents' Service ``namespace/service``'s ready endpoints on ``port`` (a port's name or
    number) by node, from its slices; :meth:`watch` makes the informer that feeds them."""

    def __init__(self, site: str, namespace: str, service: str, port: str | int) -> None:
        self.site = site
        self.namespace = namespace
        self.service = service
        self.port = port
        self.book = SliceBook()

    def watch(self, config: SingleConfig, resync_s: float) -> Informer[SliceEndpoints]:
        """The informer of the Service's slices (not started), feeding :attr:`book`."""
        return Informer(
            config,
            RawEndpointSlice,
            partial(read_slice, port_of=self.port),
            self.book.on_event,
            fields={"metadata.namespace": self.namespace},
            labels={SERVICE_NAME: self.service},
            resync_s=resync_s,
            name=f"site-{self.site}-agent-endpointslices",
        )

    def urls(self) -> dict[str, str]:
        """Each node's agent metrics URL now, for the nodes that have a ready agent."""
        found = self.book.by_node(self.namespace, self.service)
        return {node: metrics_url(host, port) for node, (host, port) in found.items()}
