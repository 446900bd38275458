"""The data dir at rest (issue 18, item 6): an emptied database never starts a new pool over an
old one unasked, job ids are never handed out twice, the admin token can be rotated (and so
recreated), and a data dir that cannot be written is refused at start or reported while running.

Real ``xpupool up`` processes on 127.0.0.1 over real files. Writes are taken away for real, with
the kernel's file-size limit (``RLIMIT_FSIZE`` 0: every write to a file fails with EFBIG, as on a
full disk), which binds root too, where a read-only mode would not.
"""

from __future__ import annotations

import resource
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import ROOT, ServerProc, free_port, until

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]


def up_once(data: Path, *args: str, limit_writes: bool = False) -> subprocess.CompletedProcess[str]:
    """``xpupool up`` expected to refuse: its exit status and output (a server that starts
    instead is killed after 30 s, and the test fails on the timeout)."""

    def no_file_writes() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))

    return subprocess.run(
        [*CLI, "up", "--no-agent", "--data", str(data), "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        preexec_fn=no_file_writes if limit_writes else None,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal: a non-zero exit and one ``Error:`` line, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [ln for ln in output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.fixture
def client() -> Iterator[Callable[[ServerProc, str | None], httpx.Client]]:
    made: list[httpx.Client] = []

    def make(srv: ServerProc, token: str | None = None) -> httpx.Client:
        c = httpx.Client(base_url=srv.url, headers=srv.headers(token))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_an_emptied_database_next_to_an_old_pool_is_refused_and_ids_never_come_back(
    tmp_path: Path, client: Callable[[ServerProc, str | None], httpx.Client]
) -> None:
    data = tmp_path / "data"
    srv = ServerProc(data, agent=True)
    srv.start()
    try:
        admin = client(srv, None)
        admin.post("/v1/tenants", json={"name": "oldco"}).raise_for_status()
        body = {"tenant": "oldco", "command": ["sh", "-c", "echo oldco-secret"]}
        r = admin.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        old_job = r.json()["id"]
        until(lambda: admin.get(f"/v1/jobs/{old_job}").json()["state"] == "succeeded", "job ran")
        assert "oldco-secret" in admin.get(f"/v1/jobs/{old_job}/logs").text
    finally:
        srv.stop()
    old_token = (data / "admin-token").read_text()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data / name).unlink(missing_ok=True)

    refusal = one_error_line(up_once(data))
    assert "missing or empty" in refusal and "--reinitialise" in refusal, refusal
    assert "admin-token" in refusal and "logs/" in refusal, refusal
    assert (data / "admin-token").read_text() == old_token  # refused: nothing rewritten
    assert not (data / "state.db").exists()

    srv.extra_args = ("--reinitialise",)
    srv.start()
    try:
        assert srv.admin_token != old_token.strip()
        aside = [p for p in data.iterdir() if p.name.startswith("old-")]
        assert len(aside) == 1 and (aside[0] / "logs" / str(old_job)).is_dir()
        admin = client(srv, None)
        stale = client(srv, old_token.strip())
        assert stale.get("/v1/tenants").status_code == 401
        admin.post("/v1/tenants", json={"name": "newco"}).raise_for_status()
        r = admin.post("/v1/jobs", json={"tenant": "newco", "command": ["sh", "-c", "echo new"]})
        assert r.status_code == 201, r.text
        new_job = r.json()["id"]
        assert new_job > old_job  # never the old job's id, so never its log
        until(lambda: admin.get(f"/v1/jobs/{new_job}").json()["state"] == "succeeded", "ran")
        assert "oldco-secret" not in admin.get(f"/v1/jobs/{new_job}/logs").text
        assert admin.get(f"/v1/jobs/{old_job}").status_code == 404
        assert admin.get(f"/v1/jobs/{old_job}/logs").status_code == 404
    finally:
        srv.stop()

    srv.extra_args = ()
    srv.start()  # the new pool is whole: no flag needed, and ids go on from where they were
    try:
        admin = client(srv, None)
        r = admin.post("/v1/jobs", json={"tenant": "newco", "command": ["true"]})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == new_job + 1
    finally:
        srv.stop()


def test_rotating_the_admin_token_recreates_a_deleted_one_and_revokes_the_old(
    tmp_path: Path, client: Callable[[ServerProc, str | None], httpx.Client]
) -> None:
    srv = ServerProc(tmp_path / "data")
    srv.start()
    first = srv.admin_token
    srv.stop()
    (srv.data / "admin-token").unlink()

    srv.extra_args = ("--rotate-admin-token",)
    srv.start()  # reads the new DATA/admin-token
    try:
        path = srv.data / "admin-token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert srv.admin_token and srv.admin_token != first
        assert client(srv, None).get("/v1/tenants").status_code == 200
        assert client(srv, first).get("/v1/tenants").status_code == 401
    finally:
        srv.stop()
    second = srv.admin_token
    srv.start()  # rotated again, with the file there: the one before is revoked too
    try:
        assert srv.admin_token not in (first, second)
        assert client(srv, None).get("/v1/tenants").status_code == 200
        assert client(srv, second).get("/v1/tenants").status_code == 401
    finally:
        srv.stop()


def test_an_admin_token_file_is_the_admin_token_and_a_new_one_revokes_it(
    tmp_path: Path, client: Callable[[ServerProc, str | None], httpx.Client]
) -> None:
    """``--admin-token-file`` (a Kubernetes Secret that a plane and its standby share): its
    token is the admin's, copied to DATA/admin-token; the same file again changes nothing; a
    new token in it revokes the one before; a file without a token is refused naming it."""
    given = tmp_path / "secret" / "token"
    given.parent.mkdir()
    first = "a" * 20 + secrets.token_hex(16)
    given.write_text(first + "\n")
    srv = ServerProc(tmp_path / "data", extra_args=("--admin-token-file", str(given)))
    srv.start()  # reads DATA/admin-token
    try:
        assert srv.admin_token == first
        assert stat.S_IMODE((srv.data / "admin-token").stat().st_mode) == 0o600
        assert client(srv, first).get("/v1/tenants").status_code == 200
    finally:
        srv.stop()
    srv.start()  # the same token: still the admin's
    try:
        assert client(srv, first).get("/v1/tenants").status_code == 200
    finally:
        srv.stop()
    second = secrets.token_urlsafe(32)
    given.write_text(second)
    srv.start()
    try:
        assert srv.admin_token == second
        assert client(srv, second).get("/v1/tenants").status_code == 200
        assert client(srv, first).get("/v1/tenants").status_code == 401
    finally:
        srv.stop()
    given.write_text("too short\n")
    refusal = one_error_line(up_once(srv.data, "--admin-token-file", str(given)))
    assert f"--admin-token-file {given}: not a token" in refusal, refusal
    assert (srv.data / "admin-token").read_text().strip() == second  # nothing changed


def test_a_data_dir_that_cannot_be_written_is_refused_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProc(data)
    srv.start()
    srv.stop()
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [data, *data.rglob("*")]}
    for p in modes:
        p.chmod(0o555 if p.is_dir() else 0o444)  # read-only (binds every user but root)
    try:
        refusal = one_error_line(up_once(data, limit_writes=True))  # binds root as well
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    assert f"data dir {data} cannot be written" in refusal, refusal
    srv.start()  # writable again: it starts
    srv.stop()


def test_a_write_failure_while_running_is_503_and_one_line_not_a_traceback_per_request(
    tmp_path: Path, client: Callable[[ServerProc, str | None], httpx.Client]
) -> None:
    srv = ServerProc(tmp_path / "data", piped=True, extra_args=("--heartbeat", "0.2"))
    srv.start()
    try:
        admin = client(srv, None)
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        assert srv.proc is not None
        soft, hard = resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (0, hard))  # as a full disk
        try:
            job = {"tenant": "team", "command": ["true"]}
            for _ in range(5):
                r = admin.post("/v1/jobs", json=job)
                assert r.status_code == 503, r.text
                reason = r.json()["reason"]
                assert reason.startswith(("store write failed", "data dir write failed"))
                assert "\n" not in reason and "INSERT" not in reason, reason
            assert admin.post("/v1/tenants", json={"name": "other"}).status_code == 503
            health = httpx.get(f"{srv.url}/healthz")
            assert health.status_code == 503
            assert health.text.startswith("unhealthy: ") and "failed" in health.text
            listed = admin.get("/v1/jobs")  # reads still work, and the refused wrote nothing
            assert listed.status_code == 200 and listed.json() == []
            time.sleep(1)  # a few background passes while failing
        finally:
            resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
        until(lambda: httpx.get(f"{srv.url}/healthz").status_code == 200, "healthy again")
        r = admin.post("/v1/jobs", json=job)
        assert r.status_code == 201, r.text
        assert r.json()["id"] == 1  # the refused submissions took no id
        until(lambda: "healthy again" in srv.log(), "the recovery logged")
    finally:
        srv.stop()
    output = (srv.data / "server.log").read_text()
    assert "Traceback" not in output, output
    assert 1 <= sum("unhealthy:" in ln for ln in output.splitlines()) <= 2, output
