"""A small Kubernetes API server on 127.0.0.1 for tests of how a Kubernetes site connects: real
HTTP, bearer tokens that can be revoked, Nodes listed and watched (a watch answers the Nodes
added since its resourceVersion, then ends after a moment, as a quiet one would at its
timeout), every other list empty, an object
created answered as made (kept nowhere), every other request 404. It records which token each
request came with. Stopped and started again on its port, it is an API server down, then back.

With ``keep_pods``, Pods are kept as a site's worker makes them: a second create of one is 409,
``answers[name]`` gives the codes its next creates get instead, lists filter by label
(``key``, ``key=value`` and ``!key`` terms) and are counted, and the most pod creates answered at once is
recorded; ``hold_until`` holds each pod create until that many are in flight (2 s at most).
Pod lists are paged as kube-apiserver pages them (``limit``, ``continue``) and counted apart from
watches (``pod_lists``, each page's ``limit`` in ``pod_list_limits``); ``expire_continues``
answers that many of the pages asked with a continue token ``410 Expired``, as a server whose
etcd compacted the list's version does. Namespaces created are kept (a second create is 409,
each create counted in ``namespace_posts``); one removed with :meth:`delete_namespace` answers
its pod creates 404, as kube-apiserver answers a create in a namespace that is not there.
EndpointSlices added with :meth:`add_slice` are listed and watched (all namespaces), filtered by
label selector and by a ``metadata.namespace`` field selector.

    with FakeApiServer(tokens={"old"}) as api:
        api.add_node(node_object("n1"))
        write it into a kubeconfig: api.kubeconfig("old")
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit


def node_object(name: str, cards: int = 1) -> dict[str, Any]:
    """A Node with HAMi's registration of ``cards`` A100s (what the site's decoder reads)."""
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-80GB",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(cards)
    ]
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


class FakeApiServer:
    def __init__(
        self, tokens: set[str], port: int = 0, *, keep_pods: bool = False, hold_until: int = 0
    ) -> None:
        self.tokens = set(tokens)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}  # namespace/name -> the EndpointSlice
        self.keep_pods = keep_pods
        self.hold_until = hold_until
        self.pods: dict[str, dict[str, Any]] = {}  # name -> the pod made (keep_pods)
        self.answers: dict[str, list[int]] = {}  # pod name -> codes its next creates get
        self.pod_posts: dict[str, int] = {}  # pod name -> creates asked
        self.pod_lists = 0  # pod list requests (pages), not watches
        self.pod_list_limits: list[int] = []  # each pod list page's limit (0: none asked)
        self.namespaces: set[str] = set()
        self.namespace_posts = 0
        self.deleted_namespaces: set[str] = set()  # their pod creates are answered 404
        self.expire_continues = 0  # continued pod list pages still to answer 410
        self.expired = 0  # continued pod list pages answered 410
        self.in_flight = self.most_in_flight = 0
        self.version = 1  # the resourceVersion of the last change
        self.seen: list[tuple[str, str]] = []  # (token, path) of every request
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            # chunked watches, as kube-apiserver sends them: a watch the client cuts is then an
            # error to it, not the end of a response read to its close
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _allowed(self) -> bool:
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                with api.lock:
                    api.seen.append((token, urlsplit(self.path).path))
                    allowed = token in api.tokens
                if not allowed:
                    self._answer(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
                return allowed

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                with api.lock:
                    items = list(api.nodes.values()) if url.path == "/api/v1/nodes" else []
                    if url.path == "/apis/discovery.k8s.io/v1/endpointslices":
                        terms = query.get("labelSelector", [""])[0]
                        fields = query.get("fieldSelector", [""])[0]
                        items = [
                            s
                            for s in api.slices.values()
                            if _selected(s, terms) and _in_namespace(s, fields)
                        ]
                    version = api.version
                    if api.keep_pods and url.path == "/api/v1/pods":
                        if query.get("watch") != ["true"]:
                            api.pod_lists += 1
                            api.pod_list_limits.append(int(query.get("limit", ["0"])[0] or 0))
                        terms = query.get("labelSelector", [""])[0]
                        items = [p for p in api.pods.values() if _selected(p, terms)]
                if not self._allowed():
                    return
                if query.get("watch") == ["true"]:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for obj in items:
                        if int(obj["metadata"]["resourceVersion"]) > since:
                            line = (json.dumps({"type": "ADDED", "object": obj}) + "\n").encode()
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    time.sleep(0.3)  # then quiet, and ended: the informer watches again
                    self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                elif api.keep_pods and url.path == "/api/v1/pods":
                    self._answer(*api.page(items, query, version))
                else:
                    meta = {"resourceVersion": str(version)}
                    self._answer(200, {"kind": "List", "metadata": meta, "items": items})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not self._allowed():
                    return
                if api.keep_pods and body.get("kind") == "Pod":
                    self._answer(*api.make_pod(body, _namespace_of(urlsplit(self.path).path)))
                elif body.get("kind") == "Namespace":
                    self._answer(*api.make_namespace(str(body["metadata"]["name"])))
                else:
                    meta = {**body.get("metadata", {}), "uid": "u", "resourceVersion": "1"}
                    self._answer(201, {**body, "metadata": meta})

            def do_DELETE(self) -> None:
                if self._allowed():
                    self._answer(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

            do_PATCH = do_PUT = do_DELETE  # noqa: N815

            def _answer(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def make_namespace(self, name: str) -> tuple[int, dict[str, Any]]:
        """A namespace create: made (201), or there already (409)."""
        with self.lock:
            self.namespace_posts += 1
            if name in self.namespaces:
                return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
            self.namespaces.add(name)
            self.deleted_namespaces.discard(name)
        meta = {"name": name, "uid": f"uid-ns-{name}", "resourceVersion": "1"}
        return 201, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}

    def delete_namespace(self, name: str) -> None:
        """The namespace is gone (deleted by someone): pod creates in it are answered 404."""
        with self.lock:
            self.namespaces.discard(name)
            self.deleted_namespaces.add(name)

    def make_pod(self, body: dict[str, Any], namespace: str = "") -> tuple[int, dict[str, Any]]:
        """A pod create (``keep_pods``) in ``namespace``: the answer's code and body."""
        name = str(body["metadata"]["name"])
        with self.lock:
            self.pod_posts[name] = self.pod_posts.get(name, 0) + 1
            if namespace in self.deleted_namespaces:
                why = f'namespaces "{namespace}" not found'
                return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": why}
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        deadline = time.monotonic() + 2.0
        while self.in_flight < self.hold_until and time.monotonic() < deadline:
            time.sleep(0.01)
        with self.lock:
            self.in_flight -= 1
            scripted = self.answers.get(name)
            if scripted:
                code = scripted.pop(0)
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                return code, {**status, "code": code, "message": f"answered {code}"}
            if name in self.pods:
                return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
            self.version += 1
            meta = {**body["metadata"], "uid": f"uid-{name}", "resourceVersion": str(self.version)}
            self.pods[name] = {**body, "metadata": meta}
            return 201, self.pods[name]

    def page(
        self, items: list[dict[str, Any]], query: dict[str, list[str]], version: int
    ) -> tuple[int, dict[str, Any]]:
        """One page of a pod list (``keep_pods``): ``limit`` pods from the continue token's
        offset, with the next token while more are left; a continued page answered 410 while
        ``expire_continues`` says so."""
        token = query.get("continue", [""])[0]
        with self.lock:
            if token and self.expire_continues > 0:
                self.expire_continues -= 1
                self.expired += 1
                why = "The provided continue parameter is too old to display a consistent list"
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                return 410, {**status, "code": 410, "reason": "Expired", "message": why}
        start = int(token) if token else 0
        limit = int(query.get("limit", ["0"])[0] or 0) or len(items)
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return 200, {"kind": "List", "metadata": meta, "items": items[start : start + limit]}

    def add_node(self, obj: dict[str, Any]) -> None:
        """Add (or replace) a Node: its next watches and lists have it."""
        with self.lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.nodes[obj["metadata"]["name"]] = obj

    def add_slice(self, obj: dict[str, Any]) -> None:
        """Add (or replace) an EndpointSlice: its next watches and lists have it."""
        meta = obj["metadata"]
        with self.lock:
            self.version += 1
            meta.setdefault("uid", f"uid-slice-{meta['name']}")
            meta["resourceVersion"] = str(self.version)
            self.slices[f"{meta['namespace']}/{meta['name']}"] = obj

    def kubeconfig(self, token: str) -> str:
        """A kubeconfig (JSON, which is YAML) for this server with ``token``."""
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": self.url}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )

    def tokens_seen(self, path: str) -> list[str]:
        with self.lock:
            return [token for token, p in self.seen if p == path]

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and close the port (again: nothing)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _namespace_of(path: str) -> str:
    """The namespace of a namespaced URL (``/api/v1/namespaces/NS/...``), or ``""``."""
    parts = path.strip("/").split("/")
    return parts[3] if len(parts) > 3 and parts[2] == "namespaces" else ""


def _selected(obj: dict[str, Any], terms: str) -> bool:
    """Does ``obj`` carry the labels of a selector's ``key`` and ``key=value`` terms, and none
    its ``!key`` terms name?"""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, terms.split(",")):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
            continue
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


def _in_namespace(obj: dict[str, Any], fields: str) -> bool:
    """Is ``obj`` in the namespace a ``metadata.namespace=NS`` field selector term names (any
    namespace without one)?"""
    for term in filter(None, fields.split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.namespace" and obj["metadata"].get("namespace") != value:
            return False
    return True
