"""A damaged ``state.db`` stops ``xpupool up`` with one line naming the file and what to do,
not two Python tracebacks (issue 43, item 17)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from server_proc import ServerProc, free_port


def test_a_corrupt_state_db_is_one_line_naming_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerProc(data):
        pass  # a real pool's database, cleanly stopped
    db = data / "state.db"
    for extra in ("state.db-wal", "state.db-shm"):
        (data / extra).unlink(missing_ok=True)
    with db.open("r+b") as f:  # keep the header, overwrite the pages after it
        f.seek(100)
        f.write(os.urandom(8000))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from xpupool.cli import main; main()",
            "up",
            "--data",
            str(data),
            "--no-agent",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    said = (done.stdout + done.stderr).strip()
    assert "Traceback" not in said, said
    assert f"{db} is not a readable database" in said, said
    assert "--reinitialise" in said and "backup" in said, said
