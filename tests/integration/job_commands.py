"""Commands for jobs that a root agent runs under a tenant's own uid.

Such a job cannot use the test's own interpreter when it lives under a private directory (this
machine's venv python resolves into /root, mode 0700): :data:`JOB_PYTHON` is a Python 3 every uid
can run, found by checking that each directory on the way lets others through.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def _runnable_by_anyone(path: Path) -> bool:
    real = path.resolve()
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def _job_python() -> str:
    if os.geteuid() != 0 or _runnable_by_anyone(Path(sys.executable)):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        if Path(candidate).exists() and _runnable_by_anyone(Path(candidate)):
            return candidate
    return sys.executable


JOB_PYTHON = _job_python()

TRAPS = [  # prints 'up'; on its checkpoint signal (SIGUSR1) 'checkpoint'; on SIGTERM 'term', ends
    JOB_PYTHON,
    "-c",
    "import os, signal, sys, time\n"
    "say = lambda word: os.write(1, word.encode() + b'\\n')\n"
    "signal.signal(signal.SIGUSR1, lambda *_: say('checkpoint'))\n"
    "signal.signal(signal.SIGTERM, lambda *_: (say('term'), sys.exit(0)))\n"
    "say('up')\n"
    "while True:\n"
    "    time.sleep(0.1)\n",
]
"""A movable job's command (checkpoint-signal=USR1), for the moves' end-to-end tests."""
