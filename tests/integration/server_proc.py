"""A real ``xpupool up`` in a subprocess on 127.0.0.1, for tests that need the whole server: crash
and restart behaviour, concurrency through real sockets, agents and the CLI talking HTTP.

    with ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED) as srv:
        httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers())
        srv.kill()       # SIGKILL: no shutdown hook runs, as in a crash
        srv.start()      # same --data, a new free port

Each start picks a free port, waits for ``/healthz`` and reads the admin token from
``DATA/admin-token``. The process runs in its own session so that a kill reaches nothing else;
``stop`` is SIGTERM then SIGKILL. Server output goes to ``DATA/server.log`` (shown when a start
times out). ``agent=False`` (default) passes ``--no-agent``: simulated cluster nodes only.
``piped``: the output goes through a pipe that this process copies to ``DATA/server.log``, for
tests that take away the server's ability to write files (its log would go with it).
``ca`` (with ``--tls-cert``/``--tls-key`` in ``extra_args``): the server speaks HTTPS, verified
against that CA file. ``cwd``: start the server in that folder with no ``--data`` at all, as a user
types it (its default, ``.xpupool``, relative to ``cwd``): ``data`` must then be
``cwd/.xpupool``, and the output goes to ``cwd/server.log`` so that the data dir is the server's
own to create. ``env``: the server's environment (default: this process's).
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_MIXED = ROOT / "examples" / "cluster-mixed.yaml"
DEFAULT_DATA = ".xpupool"  # `xpupool up`'s --data when none is given


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll ``check`` every 0.1 s until it returns something true, and return that; fail the
    test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a process a test started is gone when it returns."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class ServerProc:
    def __init__(
        self,
        data: Path,
        *,
        cluster: Path | None = None,
        agent: bool = False,
        extra_args: tuple[str, ...] = (),
        start_timeout_s: float = 60.0,
        ca: Path | None = None,
        piped: bool = False,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        assert cwd is None or data == cwd / DEFAULT_DATA, f"the default data dir is {DEFAULT_DATA}"
        self.data = data
        self.cwd = cwd
        self.env = env
        self.log_path = (cwd if cwd is not None else data) / "server.log"
        self.piped = piped
        self.cluster = cluster
        self.agent = agent
        self.extra_args = extra_args
        self.start_timeout_s = start_timeout_s
        self.verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(ca)) if ca is not None else True
        )
        self.scheme = "https" if ca is not None else "http"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.admin_token = ""

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def headers(self, token: str | None = None) -> dict[str, str]:
        """Authorization for ``token`` (default: the admin's)."""
        return {"Authorization": f"Bearer {token or self.admin_token}"}

    def tenant_client(self, name: str) -> httpx.Client:
        """A new tenant ``name`` and a client acting with its own tenant token (close it)."""
        with httpx.Client(base_url=self.url, headers=self.headers(), verify=self.verify) as admin:
            admin.post("/v1/tenants", json={"name": name}).raise_for_status()
            r = admin.post(f"/v1/tenants/{name}/tokens", json={"role": "tenant"})
            r.raise_for_status()
        return httpx.Client(
            base_url=self.url, headers=self.headers(r.json()["token"]), verify=self.verify
        )

    def agent_token_file(self, path: Path, tenant: str) -> Path:
        """An agent token of new tenant ``tenant`` (bound to the first node it registers),
        written 0600 to ``path``, as an operator hands one to ``xpupool agent --token-file``."""
        with httpx.Client(base_url=self.url, headers=self.headers(), verify=self.verify) as admin:
            admin.post("/v1/tenants", json={"name": tenant}).raise_for_status()
            r = admin.post(f"/v1/tenants/{tenant}/tokens", json={"role": "agent"})
            r.raise_for_status()
        path.write_text(r.json()["token"] + "\n")
        path.chmod(0o600)
        return path

    def start_agent(
        self,
        tmp: Path,
        node: str,
        fake: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        again: bool = False,
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """A standalone ``xpupool agent`` for ``node`` with devices from ``fake``, its token (of
        a new tenant ``<node>-ops``; ``again``: the one an earlier call wrote, for the same
        agent started again) and work dir under ``tmp``; its output in the returned log. Stop
        it with :func:`stop_process`."""
        token_file = tmp / "agent-token"
        if not again:
            self.agent_token_file(token_file, f"{node}-ops")
        log = tmp / "agent.log"
        argv = [sys.executable, "-c", "from xpupool.cli import main; main()", "agent"]
        argv += ["--server", self.url, "--token-file", str(token_file), "--node", node]
        argv += ["--fake", str(fake), "--work-dir", str(tmp / "agent"), *extra]
        with log.open("ab" if again else "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        return proc, log

    def start(self, same_port: bool = False) -> ServerProc:
        """Start (or start again, on the same data) and wait until it answers. ``same_port``:
        on the port of the last start, so that agents started against it find it again."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if self.cwd is None:
            self.data.mkdir(parents=True, exist_ok=True)
        if not (same_port and self.port):
            self.port = free_port()
        args = [sys.executable, "-c", "from xpupool.cli import main; main()", "up"]
        if self.cwd is None:
            args += ["--data", str(self.data)]
        args += ["--port", str(self.port)]
        if self.cluster is not None:
            args += ["--cluster", str(self.cluster)]
        if not self.agent:
            args.append("--no-agent")
        args += list(self.extra_args)
        if self.piped:
            self.proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.cwd or ROOT,
                env=self.env,
            )
            threading.Thread(target=self._copy_output, args=(self.proc,), daemon=True).start()
        else:
            log = self.log_path.open("ab")
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.cwd or ROOT,
                env=self.env,
            )
            log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"xpupool up exited with {self.proc.returncode}:\n{self.log()}")
            try:
                r = httpx.get(f"{self.url}/healthz", timeout=1.0, verify=self.verify)
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError(
                f"xpupool up did not answer in {self.start_timeout_s} s:\n{self.log()}"
            )
        self.admin_token = (self.data / "admin-token").read_text().strip()
        return self

    def _copy_output(self, proc: subprocess.Popen[bytes]) -> None:
        """``piped``: copy the server's output to DATA/server.log from this process, so that it
        is kept even while the server itself can write no file."""
        assert proc.stdout is not None
        with self.log_path.open("ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed by the server."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def __enter__(self) -> ServerProc:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
