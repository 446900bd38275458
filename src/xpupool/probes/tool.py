"""Run a vendor command-line tool and map every way it can fail to a :class:`ProbeError`.

Running is kept apart from parsing: parsers are pure functions of the tool's text and are tested on
recorded output; this module only starts the process, with a timeout, in the C locale so numbers and
words are printed the way the fixtures show.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from xpupool.probes.base import ProbeError, ProbeFailure

DEFAULT_TIMEOUT_S = 10.0


def tool_present(name: str) -> bool:
    return shutil.which(name) is not None


def run_tool(vendor: str, argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """stdout of ``argv``; raises ProbeError (tool missing, permission, timeout, non-zero exit)."""
    command = " ".join(argv)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except FileNotFoundError:
        raise ProbeError(
            vendor, command, ProbeFailure.TOOL_MISSING, f"{argv[0]} not on PATH"
        ) from None
    except PermissionError as exc:
        raise ProbeError(vendor, command, ProbeFailure.PERMISSION, str(exc)) from None
    except subprocess.TimeoutExpired:
        raise ProbeError(
            vendor, command, ProbeFailure.TIMEOUT, f"no answer in {timeout_s:g} s"
        ) from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        message = detail[-1] if detail else f"exit code {done.returncode}"
        kind = (
            ProbeFailure.PERMISSION if "permission" in message.lower() else ProbeFailure.TOOL_FAILED
        )
        raise ProbeError(vendor, command, kind, message)
    return done.stdout
