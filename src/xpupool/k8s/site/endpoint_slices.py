"""A Kubernetes Service's ready endpoints, read from its EndpointSlices: what the plane's proxy
forwards to for a service that runs on a Kubernetes site (``server/service_endpoints.py``: the
proxy reads only ready (host, port), whoever found them).

A slice is the cluster's word on which addresses serve a Service (the endpointslice controller
writes them from the pods' readiness, which the Deployment's readiness probe decides; a
selector-less Service's slices are written by whoever manages them). Slices are as hostile as any
object a site sends: addresses must be IP addresses of the slice's type, ports whole numbers of
1..65535, counts bounded; a slice that is not is dropped whole (logged by the informer), so one bad
slice never hides another's endpoints. An endpoint is ready unless its ``conditions.ready`` is
false (absent means ready, as the API defines it) and not while it is terminating.

The same slices say where each node's xpupool node agent answers (``agent_endpoints.py``): a
ready endpoint's ``nodeName`` (a DNS subdomain, or the slice is dropped) is kept beside its
address, and the port is chosen by the name or number the caller gives.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model.errors import RequestError
from xpupool.server.service_endpoints import Endpoint

__all__ = ["PORT_NAME", "SERVICE_NAME", "SliceBook", "SliceEndpoints", "read_slice"]

SERVICE_NAME = "kubernetes.io/service-name"  # the label naming a slice's Service
PORT_NAME = "http"  # the port of the Services the plane makes (k8s/site/services.py)
MAX_ENDPOINTS = 1000  # the API's own cap per slice
MAX_ADDRESSES = 100
MAX_PORTS = 100
_NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a DNS subdomain


@dataclass(frozen=True, slots=True)
class SliceEndpoints:
    """One EndpointSlice as the proxy needs it: whose Service, and its ready (host, port);
    ``nodes``: the ready endpoints that name their node, as (node, host, port)."""

    namespace: str
    service: str
    ready: tuple[tuple[str, int], ...]
    nodes: tuple[tuple[str, str, int], ...] = ()


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(where, repr(value)[:80], "expected an object")
    return value


def _list(value: object, where: str, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most:
        raise RequestError(where, repr(value)[:80], f"a list of at most {most}")
    return value


def _port(ports: list[Any], wanted: str | int) -> int | None:
    """The slice's port of the Service's port named ``wanted`` (or its only port), or the one
    numbered ``wanted``."""
    found: list[tuple[str, int]] = []
    for i, p in enumerate(ports):
        entry = _mapping(p, f"ports[{i}]")
        number = entry.get("port")
        if number is None:
            continue  # no port: "all ports" in the API, nothing the proxy can dial
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            raise RequestError(f"ports[{i}].port", repr(number)[:40], "a port of 1..65535")
        name = entry.get("name") or ""
        found.append((name if isinstance(name, str) else "", number))
    if isinstance(wanted, int):
        return wanted if any(n == wanted for _, n in found) else None
    named = [n for name, n in found if name == wanted]
    if named:
        return named[0]
    return found[0][1] if len(found) == 1 else None


def _node_name(entry: Mapping[str, Any], i: int) -> str | None:
    name = entry.get("nodeName")
    if name is None:
        return None
    if not isinstance(name, str) or not _NODE_NAME.fullmatch(name):
        raise RequestError(f"endpoints[{i}].nodeName", repr(name)[:80], "a node's name")
    return name


def read_slice(obj: Mapping[str, Any], port_of: str | int = PORT_NAME) -> SliceEndpoints:
    """An EndpointSlice object as :class:`SliceEndpoints`, its endpoints on the port named (or
    numbered) ``port_of``; :class:`RequestError` naming the field for one that is not what the
    API serves."""
    meta = _mapping(obj.get("metadata"), "metadata")
    labels = _mapping(meta.get("labels"), "metadata.labels")
    service = labels.get(SERVICE_NAME)
    if not isinstance(service, str) or not service or len(service) > 63:
        raise RequestError(f"metadata.labels[{SERVICE_NAME}]", repr(service)[:80], "no Service")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace or len(namespace) > 63:
        raise RequestError("metadata.namespace", repr(namespace)[:80], "expected a namespace")
    kind = obj.get("addressType")
    if kind not in ("IPv4", "IPv6"):  # FQDN slices name hosts the plane does not resolve
        return SliceEndpoints(namespace, service, ())
    port = _port(_list(obj.get("ports"), "ports", MAX_PORTS), port_of)
    ready: set[tuple[str, int]] = set()
    nodes: set[tuple[str, str, int]] = set()
    for i, e in enumerate(_list(obj.get("endpoints"), "endpoints", MAX_ENDPOINTS)):
        entry = _mapping(e, f"endpoints[{i}]")
        node = _node_name(entry, i)
        conditions = _mapping(entry.get("conditions"), f"endpoints[{i}].conditions")
        addresses = _list(entry.get("addresses"), f"endpoints[{i}].addresses", MAX_ADDRESSES)
        for j, address in enumerate(addresses):
            try:
                ip = ipaddress.ip_address(address if isinstance(address, str) else "")
            except ValueError:
                where = f"endpoints[{i}].addresses[{j}]"
                raise RequestError(where, repr(address)[:80], f"an {kind} address") from None
            if ip.version != (4 if kind == "IPv4" else 6):
                where = f"endpoints[{i}].addresses[{j}]"
                raise RequestError(where, str(ip), f"an {kind} address")
            serving = conditions.get("ready") is not False
            if port is not None and serving and conditions.get("terminating") is not True:
                ready.add((str(ip), port))
                if node is not None:
                    nodes.add((node, str(ip), port))
    return SliceEndpoints(namespace, service, tuple(sorted(ready)), tuple(sorted(nodes)))


class SliceBook:
    """The slices one site's informer delivers, by Service: the ready endpoints of each, merged
    over its slices in a stable order. Fed on the informer's thread, read on the controller's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, SliceEndpoints] = {}  # namespace/name of the slice -> it
        self._by_service: dict[tuple[str, str], tuple[Endpoint, ...]] = {}

    def on_event(self, event: Event[SliceEndpoints]) -> None:
        with self._lock:
            old = self._slices.get(event.key)
            if event.type is EventType.DELETED:
                self._slices.pop(event.key, None)
            else:
                self._slices[event.key] = event.value
            for s in {event.value, *(() if old is None else (old,))}:
                self._merge(s.namespace, s.service)

    def _merge(self, namespace: str, service: str) -> None:
        found = {
            hp
            for s in self._slices.values()
            if s.namespace == namespace and s.service == service
            for hp in s.ready
        }
        key = (namespace, service)
        if found:
            self._by_service[key] = tuple(Endpoint(0, 0, h, p) for h, p in sorted(found))
        else:
            self._by_service.pop(key, None)

    def ready(self, namespace: str, service: str) -> Sequence[Endpoint]:
        with self._lock:
            return self._by_service.get((namespace, service), ())

    def by_node(self, namespace: str, service: str) -> dict[str, tuple[str, int]]:
        """The Service's ready endpoints by the node they run on: the first (host, port) in
        order where a node has two (a DaemonSet's pod and its replacement, both ready)."""
        with self._lock:
            found = sorted(
                n
                for s in self._slices.values()
                if s.namespace == namespace and s.service == service
                for n in s.nodes
            )
        out: dict[str, tuple[str, int]] = {}
        for node, host, port in found:
            out.setdefault(node, (host, port))
        return out
