"""The README's five-minute walkthrough, run as written against a real ``xpupool up`` on the
example pool with its in-process agent, so that the README cannot drift from what the CLI does.

The block under "## Five minutes with it" runs as one bash script from a fresh folder that holds
``.xpupool/`` (the server's data) and a ``.venv/bin/xpupool`` that runs this checkout, as ``make run``
leaves them; only the server's port differs (``XPUPOOL_URL``). A line whose comment says
``refused`` must fail; every other line must succeed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from server_proc import CLUSTER_MIXED, ROOT, ServerProc

SECTION = "## Five minutes with it"


def walkthrough() -> list[str]:
    """The command lines of the first ``sh`` block under ``SECTION``."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(SECTION) :]
    block = after[after.index("```sh\n") + len("```sh\n") :]
    return [line for line in block[: block.index("```")].splitlines() if line.strip()]


def as_script(lines: list[str]) -> str:
    """``set -e``, and each line expected to be refused wrapped so that success fails the script."""
    out = ["set -e"]
    for line in lines:
        command, _, comment = line.partition("  # ")
        if "refused" in comment:
            out.append(f"if {command}; then echo 'not refused: {command}' >&2; exit 9; fi")
        else:
            out.append(command)
    return "\n".join(out) + "\n"


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    lines = walkthrough()
    assert any("submit" in line for line in lines) and any("refused" in line for line in lines)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    xpupool = tmp_path / ".venv" / "bin" / "xpupool"
    xpupool.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "from xpupool.cli import main; main()" "$@"\n'
    )
    xpupool.chmod(0o755)
    (tmp_path / "home").mkdir()
    with ServerProc(tmp_path / ".xpupool", cluster=CLUSTER_MIXED, agent=True) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith("XPUPOOL_")}
        env.update(XPUPOOL_URL=srv.url, HOME=str(tmp_path / "home"), COLUMNS="80")
        done = subprocess.run(
            ["bash", "-c", as_script(lines)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "succeeded" in out  # the first job ran to its end
    assert "6× 25% L20 on" in out  # the jobs table groups the six slices
    assert "quota" in out and "cancelled" in out
    assert "100Gi" in done.stderr  # the refusal says why
