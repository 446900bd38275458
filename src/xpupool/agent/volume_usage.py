"""What the volumes a node mounts hold (docs/agent.md#volumes): bytes on disk, walked without
following a link, each file counted once (hard links), bounded so that a huge volume costs a
heartbeat a bounded walk and is reported as "at least".

The agent measures the directories its replicas were given (a per-tenant volume's tenant
directory, a shared volume whole) every ``EVERY_S`` and sends the figures with a heartbeat; the
server shows them with the volume and names who is over its quota.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass

EVERY_S = 60.0
MAX_ENTRIES = 200_000
MAX_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Measure:
    bytes: int
    complete: bool


def measure(path: str, max_entries: int = MAX_ENTRIES, max_s: float = MAX_SECONDS) -> Measure:
    """Bytes allocated under ``path`` (``st_blocks``, as ``du`` counts), stopping at
    ``max_entries`` entries or ``max_s`` seconds (then ``complete`` is False)."""
    deadline = time.monotonic() + max_s
    seen: set[tuple[int, int]] = set()
    total, entries = 0, 0
    stack = [path]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                for entry in it:
                    entries += 1
                    if entries > max_entries or time.monotonic() > deadline:
                        return Measure(total, False)
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in seen:
                        continue
                    seen.add(key)
                    total += st.st_blocks * 512
        except OSError:
            continue
    return Measure(total, True)
