"""A Kubernetes site's pod logs followed through the API server (``pods/log``, issue 49 part 2):
a real lightkube client against a local HTTP server that answers as kube-apiserver does (a
recorded response: ``text/plain``, chunked, the container's bytes as written), so the follower's
requests, its offsets, its reopening of a broken stream and its ends are real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from xpupool.k8s.informers.kubeconfig import load_config, make_client
from xpupool.k8s.site.pod_logs import LogTarget, PodLogs

# What kube-apiserver 1.36 sent for `GET .../pods/xp-7-0-1/log?container=main&follow=true` of a
# container that printed three lines (the kubelet's stream, passed through unchanged).
RECORDED = [b"epoch 1 loss=0.91\n", b"epoch 2 loss=0.52\n", "epoch 3 \u2713 done\n".encode()]


class FakeApiServer(BaseHTTPRequestHandler):
    """Answers the log of pod ``ns/xp-7-0-1`` (404 for any other): the first stream breaks
    after two lines, the next ones send the whole log; every request's path is recorded."""

    protocol_version = "HTTP/1.1"
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        if not self.path.startswith("/api/v1/namespaces/ns/pods/xp-7-0-1/log?"):
            body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}'
            self.send_response(404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        lines = RECORDED[:2] if len(type(self).paths) == 1 else RECORDED
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for line in lines:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        if len(type(self).paths) == 1:
            self.close_connection = True  # broken: no last chunk
            return
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Path]:
    FakeApiServer.paths = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    yield kubeconfig
    server.shutdown()
    server.server_close()


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


TARGET = LogTarget(job=7, replica=0, attempt=1, node="kw-0")


def test_a_pods_log_is_copied_with_offsets_and_read_again_after_a_broken_stream(
    api: Path,
) -> None:
    client = make_client(load_config(api))
    got: list[tuple[LogTarget, bytes, int]] = []
    finished = threading.Event()  # the pod's state as the informer would say it

    def sink(target: LogTarget, chunk: bytes, offset: int) -> bool:
        got.append((target, chunk, offset))
        if len(got) == 2:
            finished.set()  # the pod ends while its first stream is broken
        return True

    logs = PodLogs("gpu-a", lambda: client, sink, lambda key: finished.is_set())
    logs.follow("ns/xp-7-0-1", TARGET)
    logs.follow("ns/xp-7-0-1", TARGET)  # followed once
    wait_until(lambda: not logs.following(), "the follower ends once the pod is finished")
    first, second = FakeApiServer.paths
    assert first == second
    assert "container=main" in first and "follow=true" in first
    # the broken stream's two lines, then the whole log again from offset 0: the plane's
    # append_log skips what it took already (tests/unit/server: uploads with offsets)
    offsets = [(chunk, offset) for _, chunk, offset in got]
    whole = [(line, sum(map(len, RECORDED[:i]))) for i, line in enumerate(RECORDED)]
    assert offsets == whole[:2] + whole
    assert {t for t, _, _ in got} == {TARGET}


def test_a_gone_pod_or_a_released_job_ends_the_follower(api: Path) -> None:
    client = make_client(load_config(api))
    logs = PodLogs("gpu-a", lambda: client, lambda *_: True, lambda key: False)
    logs.follow("ns/xp-8-0-1", TARGET)  # 404: gone
    wait_until(lambda: not logs.following(), "a 404 ends the follower")
    refused: list[int] = []

    def sink(target: LogTarget, chunk: bytes, offset: int) -> bool:
        refused.append(offset)
        return False  # the job was released

    logs = PodLogs("gpu-a", lambda: client, sink, lambda key: False)
    logs.follow("ns/xp-7-0-1", TARGET)
    wait_until(lambda: not logs.following(), "a refusing sink ends the follower")
    assert refused == [0]
