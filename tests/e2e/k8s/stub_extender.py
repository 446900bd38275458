"""A minimal kube-scheduler extender over real HTTP, for proving the wiring to a real kube-scheduler
before the engine-backed extender exists. It admits a fixed set of nodes, scores them from a fixed
table, binds through the apiserver's ``pods/binding`` subresource, and records every call.

Wire format: ``k8s.io/kube-scheduler/extender/v1`` types.go (v0.36.3). Those Go structs carry no
JSON tags, so the keys are the Go field names: ``ExtenderArgs{Pod, Nodes, NodeNames}`` in,
``ExtenderFilterResult{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}`` out for
filter; a bare ``HostPriorityList`` (``[{Host, Score}]``, Score 0..10) for prioritize;
``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`` in and ``ExtenderBindingResult{Error}``
out for bind. kube-scheduler POSTs to ``<urlPrefix>/<verb>`` and treats any non-200 as a transport
failure, so logical failures go back as 200 with ``Error`` set (pkg/scheduler/extender.go).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

MAX_EXTENDER_PRIORITY = 10  # extender/v1 MaxExtenderPriority


@dataclass(frozen=True)
class Call:
    """One request as received: the verb (last path segment) and its decoded JSON body."""

    verb: str
    body: Any


class StubExtender:
    """A filter/prioritize/bind extender on 127.0.0.1 (a free port) in a background thread.

    ``admit``: node names the filter passes; every other candidate goes to ``FailedNodes``.
    ``scores``: prioritize scores by node (default 0). Bind needs the apiserver, which usually
    starts after the extender (the scheduler config needs this URL), so call ``connect`` then.
    """

    def __init__(
        self, admit: set[str], scores: Mapping[str, int] | None = None, prefix: str = "/scheduler"
    ) -> None:
        self.admit = set(admit)
        self.scores = dict(scores or {})
        self.prefix = prefix
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self._api: httpx.Client | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The extender's ``urlPrefix`` for the scheduler configuration."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

    def connect(self, api: httpx.Client) -> None:
        """Give bind a client for the apiserver (already authenticated)."""
        self._api = api

    def __enter__(self) -> StubExtender:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- recorded calls ----------------------------------------------------------------------

    def calls(self, verb: str | None = None) -> list[Call]:
        """Every call so far (or those of one verb), in arrival order."""
        with self._lock:
            return [c for c in self._calls if verb is None or c.verb == verb]

    # -- verbs -------------------------------------------------------------------------------

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        names: list[str] = args.get("NodeNames") or [
            n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []
        ]
        passed = [n for n in names if n in self.admit]
        failed = {n: "stub extender: node not admitted" for n in names if n not in self.admit}
        # Mirrors encoding/json on ExtenderFilterResult: nil pointer/map -> null, "" for Error.
        return {
            "Nodes": None,
            "NodeNames": passed,
            "FailedNodes": failed or None,
            "FailedAndUnresolvableNodes": None,
            "Error": "",
        }

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        names: list[str] = args.get("NodeNames") or []
        return [
            {"Host": n, "Score": max(0, min(MAX_EXTENDER_PRIORITY, self.scores.get(n, 0)))}
            for n in names
        ]

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        if self._api is None:
            return {"Error": "stub extender: not connected to an apiserver"}
        ns, name, node = args["PodNamespace"], args["PodName"], args["Node"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The UID makes the apiserver refuse to bind a different pod of the same name.
            "metadata": {"name": name, "namespace": ns, "uid": args.get("PodUID") or None},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            r = self._api.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", json=binding)
        except httpx.HTTPError as exc:
            return {"Error": f"stub extender: binding {ns}/{name}: {exc!r}"}
        if r.status_code != 201:
            return {"Error": f"stub extender: binding {ns}/{name}: HTTP {r.status_code} {r.text}"}
        return {"Error": ""}

    # -- HTTP plumbing -----------------------------------------------------------------------

    def _dispatch(self, path: str, body: Any) -> tuple[int, Any]:
        if not path.startswith(self.prefix + "/"):
            return 404, {"Error": f"unknown path {path}"}
        verb = path[len(self.prefix) + 1 :]
        with self._lock:
            self._calls.append(Call(verb, body))
        if verb == "filter":
            return 200, self.filter(body)
        if verb == "prioritize":
            return 200, self.prioritize(body)
        if verb == "bind":
            return 200, self.bind(body)
        return 404, {"Error": f"unknown verb {verb}"}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Go's client expects

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    status, payload = 400, {"Error": "body is not JSON"}
                else:
                    status, payload = stub._dispatch(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # calls are recorded; the default stderr line per request is noise

        return Handler
