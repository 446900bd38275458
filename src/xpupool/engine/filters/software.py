"""Software needs (``cuda>=12.4``, ``cann>=8.0.RC1``, ``torch==2.4``) against each device's driver.

The compatibility table decides per distinct (vendor, driver, runtimes) profile, of which a cluster
has few, so each need costs one table check per profile and one gather over the device grid.
When explaining, each need is its own stage, and a node is blamed on its most hopeful device:
a driver that is too old beats one that cannot run the software at all.
"""

from __future__ import annotations

import weakref
from typing import ClassVar

import numpy as np

from xpupool.catalog import Verdict
from xpupool.engine.context import Context
from xpupool.engine.filters.base import Stage
from xpupool.engine.lru import Lru
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState, IntArray, SoftwareProfile
from xpupool.model.request import Request, SoftwareNeed

# Verdict -> reason, in order of hope (lower = closer to working): a node is blamed on its best device.
HOPE_ORDER: tuple[Reason, ...] = (
    Reason.DRIVER_TOO_OLD,
    Reason.DRIVER_TOO_NEW,
    Reason.DRIVER_UNKNOWN,
    Reason.SOFTWARE_UNSUPPORTED,
)
_HOPE_OF: dict[Verdict, int] = {
    Verdict.DRIVER_TOO_OLD: 0,
    Verdict.DRIVER_TOO_NEW: 1,
    Verdict.DRIVER_UNKNOWN: 2,
    Verdict.UNSUPPORTED: 3,
}
NO_HOPE = len(HOPE_ORDER)


# Verdicts kept per state: (need, number of profiles) -> verdicts. Each is a few ints; a fleet
# sees a few dozen distinct needs, the bound stops a long-running server's from piling up.
VERDICTS_BOUND = 1024


class Software:
    name: ClassVar[str] = "Software"
    reason: ClassVar[Reason] = Reason.SOFTWARE_UNSUPPORTED
    dynamic: ClassVar[bool] = False

    def __init__(self) -> None:
        # One filter serves every engine: the verdicts are kept per state, and go with it.
        self._verdicts: weakref.WeakKeyDictionary[
            ClusterState, Lru[tuple[SoftwareNeed, int], IntArray]
        ] = weakref.WeakKeyDictionary()
        self._details: weakref.WeakKeyDictionary[
            ClusterState, Lru[tuple[SoftwareNeed, int], tuple[str, ...]]
        ] = weakref.WeakKeyDictionary()
        self.verdicts_bound = VERDICTS_BOUND

    def need_verdicts(self, state: ClusterState, need: SoftwareNeed) -> IntArray:
        """Hope rank per software profile (-1 = OK), with a trailing NO_HOPE entry for absent
        slots. Read-only. A state's profiles are only ever appended and its compatibility table
        is fixed, so a need's verdicts stay valid until a profile is added."""
        memo = self._verdicts.get(state)
        if memo is None:
            memo = self._verdicts[state] = Lru(self.verdicts_bound)
        key = (need, len(state.profiles))
        found = memo.get(key)
        if found is not None:
            return found
        out = np.full(len(state.profiles) + 1, NO_HOPE, np.int64)
        for pid, profile in enumerate(state.profiles):
            verdict = state.compat.check(
                need, profile.vendor, profile.driver_version, dict(profile.runtimes)
            )
            out[pid] = -1 if verdict == Verdict.OK else _HOPE_OF[verdict]
        out.flags.writeable = False
        return memo.put(key, out)

    def cached_verdicts(self, state: ClusterState) -> int:
        """How many needs' verdicts are kept for ``state``."""
        memo = self._verdicts.get(state)
        return 0 if memo is None else len(memo)

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        needs = req.devices.software
        if not needs:
            return None
        ok = np.ones(len(state.profiles) + 1, np.bool_)
        for need in needs:
            ok &= self.need_verdicts(state, need) < 0
        result: BoolArray = ok[state.dev_profile]
        return result

    def stages(self, req: Request, state: ClusterState, ctx: Context) -> list[Stage]:
        stages = []
        profile_of = np.where(state.dev_profile < 0, len(state.profiles), state.dev_profile)
        for need in req.devices.software:
            hope = self.need_verdicts(state, need)[state.dev_profile]
            details = self.need_details(state, need)
            stages.append(
                Stage(
                    hope < 0,
                    self.reason,
                    str(need),
                    codes=hope,
                    details=details,
                    detail_codes=profile_of,
                )
            )
        return stages

    def need_details(self, state: ClusterState, need: SoftwareNeed) -> tuple[str, ...]:
        """Per software profile (and a trailing one for absent slots), the detail its reason is
        worded with: a driver too old names itself and the driver the tables ask for
        ("525.85.12 too old for cuda>=12.4: needs >= 550.54.14", read as "driver ..."); other
        verdicts name the need. Made on the explaining path only, once per (need, profile)."""
        memo = self._details.get(state)
        if memo is None:
            memo = self._details[state] = Lru(self.verdicts_bound)
        key = (need, len(state.profiles))
        found = memo.get(key)
        if found is not None:
            return found
        hope = self.need_verdicts(state, need)
        out = [str(need)] * (len(state.profiles) + 1)
        for pid, profile in enumerate(state.profiles):
            if hope[pid] == _HOPE_OF[Verdict.DRIVER_TOO_OLD]:
                out[pid] = too_old_detail(state, need, profile)
        return memo.put(key, tuple(out))


def too_old_detail(state: ClusterState, need: SoftwareNeed, profile: SoftwareProfile) -> str:
    """``525.85.12 too old for cuda>=12.4: needs >= 550.54.14``: the device's driver (or the
    runtime version it reports, when it reports one for the need), the need, and the lowest
    driver above it that the compatibility tables say runs the need (left out when they cannot
    say, e.g. a ROCm install older than asked)."""
    reported = dict(profile.runtimes).get(need.name)
    if profile.driver_version:
        have = profile.driver_version
        if reported:
            have += f" ({need.name} {reported})"
    else:
        have = f"reporting {need.name} {reported}" if reported else "unknown"
    needed = state.compat.needed_driver(need, profile.vendor, profile.driver_version)
    text = f"{have} too old for {need}"
    return f"{text}: needs >= {needed}" if needed is not None else text
