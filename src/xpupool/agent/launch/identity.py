"""Which uid a tenant's replicas run as when the agent is root.

Each tenant gets a uid of its own from a configured numeric range, by a stable index the server
sends with the work (``Work.tenant_index``): no account is created and /etc/passwd is not edited,
so the uid owns nothing on the host but the job's own working directory. The range may contain
neither root nor the agent's own uid, so a job can never act as either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_UID_RANGE = "200000-299999"


@dataclass(frozen=True, slots=True)
class UidRange:
    """``first``..``last`` inclusive; tenant index ``i`` runs as ``first + i``."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    @classmethod
    def parse(cls, text: str, agent_uid: int | None = None) -> UidRange:
        """``"200000-299999"``; raises ValueError naming what is wrong."""
        lo, sep, hi = text.partition("-")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"{text!r}: expected FIRST-LAST, e.g. {DEFAULT_UID_RANGE}")
        out = cls(int(lo), int(hi))
        if out.first <= 0:
            raise ValueError(f"{text!r}: must not include uid 0 (root)")
        if out.last < out.first:
            raise ValueError(f"{text!r}: LAST is below FIRST")
        if out.last >= 2**32 - 1:
            raise ValueError(f"{text!r}: LAST must be below 4294967295")
        own = os.getuid() if agent_uid is None else agent_uid
        if out.first <= own <= out.last:
            raise ValueError(f"{text!r}: includes the agent's own uid {own}")
        return out

    def uid_for(self, tenant_index: int) -> int | None:
        """The uid of tenant ``tenant_index``; None when the range has no room for it."""
        if tenant_index < 0 or self.first + tenant_index > self.last:
            return None
        return self.first + tenant_index


def uid_range_for_agent(text: str) -> UidRange | None:
    """The range a root agent switches to; None when the agent is not root (it cannot switch,
    and jobs run as its own user)."""
    rng = UidRange.parse(text)
    return rng if os.geteuid() == 0 else None


def isolation_notice(sandbox: str, euid: int | None = None) -> str | None:
    """The one line ``xpupool up`` and ``xpupool agent`` print at start when jobs get no
    isolation from them: not root (no uid to switch to) and no sandbox. None otherwise."""
    uid = os.geteuid() if euid is None else euid
    if uid == 0 or sandbox == "bwrap":
        return None
    return (
        f"jobs run as this user (uid {uid}) and can read what it can read;"
        " run as root for a uid per tenant, or use --sandbox bwrap"
    )
