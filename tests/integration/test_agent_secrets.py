"""The agent token against a real ``xpupool up`` and real ``xpupool agent`` subprocesses: a job
cannot read it out of the agent's process, and ``--token-file`` keeps it out of ``ps``."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import CLI, FAKE


@dataclass
class Setup:
    srv: ServerProc
    data: Path
    admin: httpx.Client
    user: httpx.Client

    def agent_token(self) -> str:
        """A fresh agent token (one speaks for the one node it registers first)."""
        r = self.admin.post("/v1/tenants/team/tokens", json={"role": "agent"})
        r.raise_for_status()
        return str(r.json()["token"])

    def agent(
        self, node: str, *args: str, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.data / f"agent-{node}.log"
        fake = self.data / f"{node}.yaml"  # device UUIDs are unique in a pool: one set per node
        fake.write_text(FAKE.read_text().replace("GPU-fake-a100", f"GPU-{node}"))
        argv = [*CLI, "agent", "--server", self.srv.url, "--node", node, "--fake", str(fake)]
        argv += ["--poll", "0.05", "--grace", "1", "--work-dir", str(self.data / node), *args]
        proc = subprocess.Popen(
            argv,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        return proc, log

    def registered(self, node: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"agent exited: {log.read_text()[-2000:]}")
            r = self.admin.get(f"/v1/nodes/{node}")
            return r.status_code == 200 and r.json()["status"] == "ready"

        until(ready, f"{node} registered")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    data = tmp_path_factory.mktemp("secrets")
    srv = ServerProc(data / "server", extra_args=("--heartbeat", "0.2", "--lost-after", "30"))
    clients: list[httpx.Client] = []
    try:
        srv.start()
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        clients.append(admin)
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
        r.raise_for_status()
        user = httpx.Client(base_url=srv.url, headers=srv.headers(r.json()["token"]))
        clients.append(user)
        yield Setup(srv, data, admin, user)
    finally:
        for c in clients:
            c.close()
        srv.stop()


def test_a_job_cannot_read_the_agents_environment(setup: Setup) -> None:
    token = setup.agent_token()
    proc, log = setup.agent("env-box", env={"XPUPOOL_TOKEN": token})
    try:
        setup.registered("env-box", proc, log)
        script = (
            f"if tr '\\0' '\\n' < /proc/{proc.pid}/environ | grep XPUPOOL_TOKEN; then"
            " echo READ; else echo DENIED; fi; echo END-OF-JOB"
        )
        r = setup.user.post("/v1/jobs", json={"command": ["sh", "-c", script], "spec": "A100"})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        until(
            lambda: setup.user.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded",
            f"job {job_id} ({log.read_text()[-1500:]})",
        )
        text = until(
            lambda: "END-OF-JOB" in (t := setup.user.get(f"/v1/jobs/{job_id}/logs").text) and t,
            "the job's log",
        )
        assert "DENIED" in text and "READ" not in text, text
        assert token not in text
    finally:
        stop_process(proc)


def test_token_file_keeps_the_token_out_of_ps(setup: Setup) -> None:
    token_file = setup.data / "agent-token"
    token = setup.agent_token()
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    proc, log = setup.agent("file-box", "--token-file", str(token_file))
    try:
        setup.registered("file-box", proc, log)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
        assert b"--token-file" in cmdline
        assert "visible to every user in ps" not in log.read_text()
    finally:
        stop_process(proc)


def test_token_on_the_command_line_still_works_but_warns(setup: Setup) -> None:
    proc, log = setup.agent("argv-box", "--token", setup.agent_token())
    try:
        setup.registered("argv-box", proc, log)
        deadline = time.monotonic() + 10
        while "visible to every user in ps" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "--token on the command line is visible to every user in ps" in log.read_text()
    finally:
        stop_process(proc)
