"""A recording HTTP proxy in front of the test kube-apiserver, for tests that must see what a
client process really sent (which verbs, which patch bodies) rather than what it says it sent.

    with ApiProxy(kc.api_url) as proxy:
        write_kubeconfig(path, proxy.url, token)   # the client under test talks to the proxy
        ...
        patches = proxy.requests("PATCH")

Plain HTTP on 127.0.0.1 toward the client, HTTPS (unverified: the test apiserver's self-signed
certificate) toward kube-apiserver. A ``before`` hook runs in the proxy thread before the next
request of its method is forwarded, so a test can make another writer act at exactly that
moment (a real conflict).
No watches or other streaming: each answer is read whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

import httpx

_FORWARDED = ("authorization", "content-type", "accept", "user-agent")


@dataclass(frozen=True)
class Seen:
    """One request and the status the apiserver answered."""

    method: str
    path: str
    body: bytes
    status: int


class ApiProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[Seen] = []
        # (method, hook): the hook runs once, before the next request with that method
        self.before: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(base_url=upstream, verify=False, timeout=30.0)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                with proxy._lock:
                    hooks = [h for m, h in proxy.before if m == self.command]
                    proxy.before = [(m, h) for m, h in proxy.before if m != self.command]
                for hook in hooks:
                    hook()
                headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED}
                r = proxy._client.request(self.command, self.path, content=body, headers=headers)
                with proxy._lock:
                    proxy.seen.append(Seen(self.command, self.path, body, r.status_code))
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _forward  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def requests(self, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if method is None or s.method == method]

    def __enter__(self) -> ApiProxy:
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
        self._thread.join(5)
        self._client.close()
