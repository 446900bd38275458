"""How a running job tells how fast it goes: a rate (steps or tokens per second) through a file
or the API (issue 55).

A replica writes its current rate, a decimal number optionally followed by its unit
(``"182.5 steps/s"``), into the file ``$XPUPOOL_PROGRESS_FILE`` names (in its own working
directory); its agent reads the file at each heartbeat, and sends a new figure with the replica's
report. The same figure may be posted to ``POST /v1/jobs/{id}/progress``. The plane turns the
rates into measured throughput per (job type, card model) (``server/throughput_knowledge.py``).
Any unit will do, as long as a job type keeps to one: only the ratios between card models count.
"""

from __future__ import annotations

import math

PROGRESS_FILE_ENV = "XPUPOOL_PROGRESS_FILE"
PROGRESS_FILE_NAME = ".xpupool-progress"
PROGRESS_FILE_MAX_BYTES = 64  # a number and a unit; the agent reads no more of the file
MAX_RATE = 1e12
"""The largest rate taken (per second): above any real job's steps or tokens per second."""


def parse_progress(text: str) -> float | None:
    """The rate in a progress file's ``text``: its first word as a number, finite, above 0 and
    at most :data:`MAX_RATE`; None for anything else (an empty file, a half-written one, junk):
    a job's file is its own business, so a bad one is skipped, never an error."""
    words = text.split()
    if not words:
        return None
    try:
        rate = float(words[0])
    except ValueError:
        return None
    return rate if math.isfinite(rate) and 0 < rate <= MAX_RATE else None
