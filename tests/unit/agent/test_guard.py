"""The agent's own process: not readable by a process of its uid, files private from the start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xpupool.agent.launch.guard import make_private, read_token_file

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux")

# A fresh (single-threaded, so fork-safe) interpreter forks a stand-in agent, protected or, for
# the control, explicitly dumpable, and then a peer of the same uid that tries to read the
# agent's environment. As root both become "nobody" first: root itself passes every ptrace check.
_PEERS = """\
import ctypes, os, sys, time
from xpupool.agent.launch.guard import dumpable, protect_process
uid = 65534 if os.geteuid() == 0 else None
def become():
    if uid is not None:
        os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
r, w = os.pipe()
target = os.fork()
if target == 0:
    become()
    if sys.argv[1] == "protect":
        protect_process()
    else:
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
    os.write(w, b"dumpable" if dumpable() else b"not-dumpable")
    time.sleep(30)
    os._exit(0)
flag = os.read(r, 20).decode()
reader = os.fork()
if reader == 0:
    become()
    try:
        open(f"/proc/{target}/environ", "rb").read()
        os._exit(0)
    except OSError:
        os._exit(1)
_, status = os.waitpid(reader, 0)
os.kill(target, 9)
os.waitpid(target, 0)
print(flag, "read" if os.waitstatus_to_exitcode(status) == 0 else "denied")
"""


def _peer_reads(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _PEERS, mode], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
def test_a_process_of_the_agents_uid_cannot_read_its_environment() -> None:
    assert _peer_reads("control") == "dumpable read"  # what a job could do before
    assert _peer_reads("protect") == "not-dumpable denied"


def test_files_are_private_from_the_first_write(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "logs" / "1").mkdir(parents=True)
    (data / "logs" / "1" / "0.log").write_text("x")
    (data / "state.db").write_text("x")
    os.chmod(data, 0o755)
    os.chmod(data / "state.db", 0o644)
    make_private(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "logs" / "1").stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "state.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "logs" / "1" / "0.log").stat().st_mode) == 0o600


def test_token_file_is_read_and_a_loose_mode_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    token.write_text("abc123\n")
    os.chmod(token, 0o600)
    assert read_token_file(token) == "abc123"
    assert "readable by others" not in caplog.text
    os.chmod(token, 0o644)
    assert read_token_file(token) == "abc123"
    assert "readable by others" in caplog.text
    token.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_token_file(token)
