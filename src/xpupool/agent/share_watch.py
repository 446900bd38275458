"""Watch and stop: a replica that uses more device memory than its share, for too long, is stopped.

Nothing on the card enforces a share's memory (HAMi-core's variables are set, not obeyed: issue 46,
docs/hardware-validation.md), so the agent does. Each pass it has each replica's device memory per
card (``Monitor.replica_usage``: the vendor's per-process figures, each process mapped to its
replica by the cgroup the agent created for it). A replica above its grant on a card by more than
``tolerance`` (a fraction of the grant), or using a card it was not granted, for longer than
``grace_s`` without a pass below, is stopped with the reason ("used 32.0 GiB of its 20 GiB share
on card GPU-..."), which frees the card for the jobs whose shares it was eating. A replica within
its grant is never touched; a brief peak over it (a spike shorter than the grace) is only flagged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from xpupool.server.schemas.agent_protocol import Work

GIB = 1024


@dataclass(slots=True)
class ShareWatch:
    """When each replica first went over its share (monotonic seconds), and the stop rule."""

    tolerance: float = 0.05
    grace_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _since: dict[tuple[int, int], float] = field(default_factory=dict)

    def check(self, key: tuple[int, int], work: Work, used: Mapping[str, int]) -> str:
        """Why replica ``key`` must be stopped now, or "": over its share on some card for at
        least ``grace_s``. ``used``: its device memory per card UUID, MiB."""
        over = self._over(work, used)
        if not over:
            self._since.pop(key, None)
            return ""
        now = self.clock()
        since = self._since.setdefault(key, now)
        if now - since < self.grace_s:
            return ""
        return f"{over}, for {now - since:.0f} s (grace {self.grace_s:g} s)"

    def keep(self, running: Iterable[tuple[int, int]]) -> None:
        """Forget every replica but ``running``: those that ended leave nothing behind."""
        alive = set(running)
        for key in [k for k in self._since if k not in alive]:
            del self._since[key]

    def _over(self, work: Work, used: Mapping[str, int]) -> str:
        granted = {d.uuid: d.memory_mib for d in work.assignment.devices}
        for uuid, mib in sorted(used.items()):
            share = granted.get(uuid)
            if share is None:
                if mib > 0:
                    return f"used {mib / GIB:.1f} GiB on card {uuid}, which it was not granted"
                continue
            if mib > share * (1.0 + self.tolerance):
                return f"used {mib / GIB:.1f} GiB of its {share / GIB:g} GiB share on card {uuid}"
        return ""
