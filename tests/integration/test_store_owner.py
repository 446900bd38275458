"""One writer per store (issue 43, item 6): the one-writer rule lives in the database, not in the
data dir. ``xpupool up --data NEW --db <a live pool's state.db>`` is refused at start, naming the
owner; a server whose lease another process took after it expired never writes again; renewal keeps
a live server the owner; a clean stop releases the store, a crash does not (until the lease ends,
or until the same data dir, locked again, proves the old process gone).

Real SQLite files and real ``xpupool up`` processes; the takeover is done as a standby will do it
(issue 50): through ``StoreOwnership.claim`` from another process, once the lease has expired.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from server_proc import ServerProc, free_port, until

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
QUIET = ("--history-interval", "1h")  # no fleet sample changes the store while a test compares it
SHORT = ("--store-lease", "1")


def db_url(data: Path) -> str:
    return f"sqlite:///{data / 'state.db'}"


def store_rows(data: Path) -> dict[str, list[Any]]:
    """Every row of every table but the owner's (whose lease the live owner renews)."""
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            n: sorted(map(repr, db.execute(f'SELECT * FROM "{n}"')))
            for n in names
            if n != "store_owner"
        }


def owner_row(data: Path) -> dict[str, Any]:
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM store_owner WHERE id = 1").fetchone()
        return dict(row)


def second_up(data: Path, db: str, *extra: str, timeout_s: float = 30.0) -> tuple[int, str]:
    """``xpupool up --data data --db db``: (exit status, output) of a start that must exit by
    itself; one that keeps serving is killed and fails the test."""
    args = [*CLI, "up", "--data", str(data), "--db", db, "--port", str(free_port())]
    proc = subprocess.Popen(
        [*args, "--no-agent", *QUIET, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"a second xpupool up on the same --db kept serving:\n{out}") from None
    return proc.returncode, out


def test_a_second_up_with_another_data_dir_on_the_same_db_is_refused(tmp_path: Path) -> None:
    first = tmp_path / "first"
    with ServerProc(first, extra_args=QUIET) as srv:
        assert srv.proc is not None
        until(lambda: store_rows(first)["fleet_history"], "the owner's first fleet sample")
        before, owner = store_rows(first), owner_row(first)
        code, out = second_up(tmp_path / "second", db_url(first))
        said = out.strip().splitlines()
        assert code == 1 and len(said) == 1, out
        line = said[0]
        assert "owned by another xpupool up" in line, line
        assert f"pid {srv.proc.pid}" in line and str(first) in line, line
        assert f"host {socket.gethostname()}" in line and "lease ends" in line, line
        assert store_rows(first) == before
        after = owner_row(first)
        assert (after["epoch"], after["pid"], after["data_dir"]) == (
            owner["epoch"],
            owner["pid"],
            owner["data_dir"],
        )
        r = httpx.post(f"{srv.url}/v1/tenants", json={"name": "still"}, headers=srv.headers())
        assert r.status_code == 201  # the owner writes on


def test_a_server_whose_lease_was_taken_refuses_its_next_write(tmp_path: Path) -> None:
    """SIGSTOP the owner past its lease, take the store as a standby would, SIGCONT it: its next
    write is refused (503: the store lost, to the new owner, or by its own clock when the lease's
    end is what it sees first on waking) and nothing of it reaches the store."""
    from xpupool.server.ownership import Identity, StoreOwnership

    data = tmp_path / "data"
    with ServerProc(data, extra_args=(*QUIET, *SHORT)) as srv:
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            standby = Identity(host="standby-host", pid=4242, data_dir="/standby")
            taker = StoreOwnership(db_url(data), standby, lease_s=60.0)
            until(lambda: _claims(taker), "the paused owner's lease to expire", timeout_s=20)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        r = httpx.post(f"{srv.url}/v1/tenants", json={"name": "late"}, headers=srv.headers())
        assert r.status_code == 503, r.text
        assert "lost the store" in r.text, r.text
        assert "standby-host" in r.text or "past its lease" in r.text, r.text
        with sqlite3.connect(data / "state.db") as db:
            assert db.execute("SELECT count(*) FROM tenants WHERE name='late'").fetchone() == (0,)
        health = httpx.get(f"{srv.url}/healthz")
        assert health.status_code == 503 and "lost the store" in health.text
        assert owner_row(data)["host"] == "standby-host"  # the old owner did not take it back
        taker.release()


def _claims(taker: Any) -> bool:
    from xpupool.server.ownership import StoreInUseError

    try:
        taker.claim()
    except StoreInUseError:
        return False
    return True


def test_renewal_keeps_a_live_server_the_owner(tmp_path: Path) -> None:
    first = tmp_path / "first"
    with ServerProc(first, extra_args=(*QUIET, *SHORT)) as srv:
        time.sleep(4)  # four leases: only renewal keeps it
        code, out = second_up(tmp_path / "second", db_url(first), *SHORT)
        assert code == 1 and "owned by another xpupool up" in out, out
        r = httpx.post(f"{srv.url}/v1/tenants", json={"name": "kept"}, headers=srv.headers())
        assert r.status_code == 201


def test_a_clean_stop_releases_the_store_and_a_crash_holds_it_until_its_lease_ends(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    srv = ServerProc(first, extra_args=QUIET).start()
    srv.stop()  # clean: the next server, on another data dir, takes the store at once
    assert owner_row(first)["lease_until"] == 0
    second.mkdir()  # the store has an admin token: the second server writes no file of it
    shutil.copy2(first / "admin-token", second / "admin-token")
    lease = ("--store-lease", "20")  # long enough for a start on a busy test machine
    other = ServerProc(second, extra_args=(*QUIET, "--db", db_url(first), *lease)).start()
    other.kill()  # a crash: its lease still runs
    code, out = second_up(first, db_url(first))
    assert code == 1 and f"data dir {second}" in out, out
    ends = owner_row(first)["lease_until"] + 2  # and the clock-skew allowance
    time.sleep(max(0.0, ends - time.time()) + 0.5)
    srv.start()  # on its own data dir, after the crashed owner's lease ended
    try:
        assert owner_row(first)["data_dir"] == str(first)
    finally:
        srv.stop()


def test_a_restart_on_the_same_data_dir_after_a_crash_takes_the_store_at_once(
    tmp_path: Path,
) -> None:
    """The data dir's lock (held by a live server, dropped by the kernel when it dies) proves the
    crashed owner gone: no wait for its lease (60 s here)."""
    data = tmp_path / "data"
    srv = ServerProc(data, extra_args=(*QUIET, "--store-lease", "60")).start()
    epoch = owner_row(data)["epoch"]
    srv.kill()
    started = time.monotonic()
    srv.start()
    try:
        assert time.monotonic() - started < 30
        row = owner_row(data)
        assert row["epoch"] == epoch + 1 and srv.proc is not None and row["pid"] == srv.proc.pid
    finally:
        srv.stop()
