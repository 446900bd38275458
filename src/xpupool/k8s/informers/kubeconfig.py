"""How the Kubernetes front reaches kube-apiserver: a lightkube client from a kubeconfig, resources
read as the plain JSON the apiserver sends, and a transport whose open watches can be cut.

Why raw JSON: the decoders (HAMi's annotations, xpupool's own) read dicts, and the apiserver's JSON
is the one exact form; lightkube decodes a ``dict`` resource with msgspec straight into dicts, with
no model in between. Why a transport of our own: a watch blocks in a socket read with no timeout
(lightkube turns the read timeout off for watches, as client-go does), and closing an httpx client
does not wake that read; shutting the socket down does. ``InterruptibleTransport.interrupt`` does
that for the watches it carries, so an informer can stop or resync at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericGlobalResource, GenericNamespacedResource

_VERBS = ["delete", "get", "global_list", "global_watch", "list", "patch", "post", "put", "watch"]


class RawNode(GenericGlobalResource):
    """A core/v1 Node as the apiserver's JSON (a dict). Not in lightkube's registry, so it does not
    shadow the typed ``lightkube.resources.core_v1.Node`` for anyone else."""

    _api_info = ApiInfo(resource=ResourceDef("", "v1", "Node"), plural="nodes", verbs=_VERBS)


class RawPod(GenericNamespacedResource):
    """A core/v1 Pod as the apiserver's JSON (a dict)."""

    _api_info = ApiInfo(resource=ResourceDef("", "v1", "Pod"), plural="pods", verbs=_VERBS)


class RawResourceQuota(GenericNamespacedResource):
    """A core/v1 ResourceQuota as the apiserver's JSON (a dict)."""

    _api_info = ApiInfo(
        resource=ResourceDef("", "v1", "ResourceQuota"), plural="resourcequotas", verbs=_VERBS
    )


class RawLease(GenericNamespacedResource):
    """A coordination.k8s.io/v1 Lease as the apiserver's JSON (a dict)."""

    _api_info = ApiInfo(
        resource=ResourceDef("coordination.k8s.io", "v1", "Lease"), plural="leases", verbs=_VERBS
    )


def load_config(path: Path | str | None = None, context: str | None = None) -> SingleConfig:
    """The kubeconfig at ``path`` (its ``context``, default the current one); with no path,
    lightkube's search: in-cluster service account, then ``$KUBECONFIG``, then ``~/.kube/config``.
    Raises lightkube's ``ConfigError`` naming what is missing."""
    config = KubeConfig.from_env() if path is None else KubeConfig.from_file(path)
    found = config.get(context)
    assert found is not None  # get() raises rather than return None without a default
    return found


class _TrackedStream(httpx2.SyncByteStream):
    """A response body that tells its transport when it is closed."""

    def __init__(self, inner: Any, on_close: Any) -> None:
        self._inner = inner
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._on_close()


class InterruptibleTransport(httpx2.HTTPTransport):
    """An HTTP transport that remembers the sockets of the watch requests (``watch=true``) it
    carries until their bodies close; :meth:`interrupt` shuts them down, so the thread blocked
    reading one gets a network error at once. Other requests are untouched. ``answered_at``
    says when the API server last answered a request (an informer's ``silent_since``)."""

    def __init__(self, config: SingleConfig) -> None:
        # A transport given to httpx replaces the default one, and with it the TLS settings the
        # client was given: take them from the kubeconfig as lightkube does.
        assert config.user is not None, "kubeconfig context has no user"
        super().__init__(verify=verify_cluster(config.cluster, config.user, config.abs_file))
        self._lock = threading.Lock()
        self._watches: dict[int, socket.socket] = {}
        self._next = 0
        # monotonic time of the API server's last answer (any status: a refusal is an answer)
        self.answered_at = -float("inf")

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        self.answered_at = time.monotonic()
        if request.url.params.get("watch") != "true":
            return response
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return response
        with self._lock:
            key = self._next
            self._next += 1
            self._watches[key] = sock

        def forget() -> None:
            with self._lock:
                self._watches.pop(key, None)

        response.stream = _TrackedStream(response.stream, forget)
        return response

    def interrupt(self) -> int:
        """Shut down every open watch's socket; returns how many. Safe from any thread."""
        with self._lock:
            socks = list(self._watches.values())
            self._watches.clear()
        for sock in socks:
            with contextlib.suppress(OSError):
                # The plain socket's shutdown, also under TLS: SSLSocket.shutdown would drop its
                # TLS state while another thread is still reading through it.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        return len(socks)


def make_client(
    config: SingleConfig,
    *,
    transport: InterruptibleTransport | None = None,
    timeout_s: float = 10.0,
    field_manager: str = "xpupool",
) -> Client:
    """A lightkube client for ``config``: plain requests time out after ``timeout_s`` (watches
    only on connect), objects decode lazily, changes are made as ``field_manager``."""
    return Client(
        config,
        timeout=httpx2.Timeout(timeout_s),
        field_manager=field_manager,
        trust_env=False,
        transport=transport,
    )
