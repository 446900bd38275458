"""``xpupool top`` piped into another program (``| tee``, ``| grep``) against a real server.

Issue 42 part 4: piped, ``top`` printed nothing for 15 s and more, because rich's live display
draws only on a terminal and keeps the frame until it stops, and Python holds a pipe's output in
its buffer. A piped ``top`` prints each frame whole, as it is taken, the first at once.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

from server_proc import CLUSTER_MIXED, ServerProc, stop_process


def _read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout_s: float) -> bytes:
    """What ``proc`` wrote to its stdout pipe until ``marker`` appeared or ``timeout_s`` passed
    (whichever first): the test waits for the frame, it never times how fast it came."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while marker not in seen and time.monotonic() < deadline:
            if sel.select(timeout=0.2):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                seen += chunk
    return seen


def test_a_piped_top_prints_its_first_frame_at_once(tmp_path: Path) -> None:
    with ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED) as srv:
        env = os.environ | {
            "XPUPOOL_URL": srv.url,
            "XPUPOOL_TOKEN": srv.admin_token,
            "HOME": str(tmp_path),
            "COLUMNS": "120",
        }
        env.pop("XPUPOOL_CONFIG", None)
        cli = [sys.executable, "-c", "from xpupool.cli import main; main()"]
        # --interval 600: no second frame comes while the test waits, only the first.
        proc = subprocess.Popen(
            [*cli, "top", "--interval", "600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            out = _read_until(proc, b"sh-l20-0", timeout_s=30)
            assert proc.poll() is None, out.decode(errors="replace")  # still live, not --once
        finally:
            stop_process(proc)
    assert b"sh-l20-0" in out, out.decode(errors="replace")
