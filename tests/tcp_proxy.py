"""A TCP relay a test can cut, standing for a network partition between a client and its server
(kube-apiserver for the watches, PostgreSQL for the plane's store). Not part of
tests/e2e/k8s/cluster.py: bench/k8s_harness.py loads cluster.py by its path, where the tests'
folders are not on the import path, so cluster.py imports nothing of theirs."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """A TCP relay on 127.0.0.1 in front of ``target`` (host, port) that a test can cut: :meth:`cut`
    drops every open connection and refuses new ones (accepted, then closed at once: a client
    sees its watch end and its reconnects fail), :meth:`resume` lets them through again. It stands
    for a network partition between a client and its server; TLS passes through untouched.
    :meth:`stall` stands for a partition that drops packets instead (a blackhole): connections
    stay open and new ones are accepted, but nothing crosses either way until :meth:`resume`,
    so a client's statements hang rather than fail (this host's kernel still answers its
    keepalives: only a timeout of the client's own ends the wait)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._flowing = threading.Event()  # cleared while stalled
        self._flowing.set()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            socks, self._open = list(self._open), set()
        for s in socks:
            _shut(s)

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        with self._lock:
            self._cut = False
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        _shut(self._server)
        self._server.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._cut
            if refuse:
                _shut(client)
                continue
            if not self._flowing.is_set():  # accepted, then held until the stall ends
                threading.Thread(target=self._connect, args=(client,), daemon=True).start()
                continue
            self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        while not self._flowing.wait(0.1):
            if self._closed:
                _shut(client)
                return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _shut(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while not self._flowing.wait(0.1):  # stalled: held, neither sent nor dropped
                    if self._closed:
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src)
            _shut(dst)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)


def _shut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
