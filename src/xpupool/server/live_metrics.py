"""The agents' live card readings as columns, and a short ring of recent readings per card.

``plane.metrics`` keeps each card's last report as a pydantic object, which is what ``/v1/devices``
shows; the fleet overview sums utilisation, memory used and power over 40,000 cards on every
request and must not walk 40,000 objects to do it. This keeps the same readings as NumPy columns
(one row per card UUID, NaN where a probe could not read a value: absent, never zero), aligned to
the engine's device slots on demand (the alignment is rebuilt only when cards or the engine
change), and per card a ring of its last ``ring`` readings, one kept at most every ``step_s``
seconds, for the device panel's sparkline.

Bounded: rows are only made for UUIDs a node registered (the heartbeat refuses others), and
:meth:`LiveMetrics.keep_only` drops rows of cards no longer in the pool; the ring costs
``ring * 24`` bytes per card (``RING`` 30: 29 MiB at 40,000 cards).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.engine.state import ClusterState

RING = 30
"""Readings kept per card for its sparkline."""
RING_STEP_S = 10.0
"""Seconds between two readings kept in a card's ring at least (heartbeats come every 5 s by
default): 30 readings cover five minutes."""
STALE_AFTER_S = 120.0
"""A reading older than this is not counted by the overview (its agent went quiet)."""
VALUES = ("util_pct", "memory_mib_used", "power_w", "temp_c")
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Reading:
    """One card's reading: each value None when the probe could not read it."""

    t: float
    util_pct: float | None
    memory_mib_used: float | None
    power_w: float | None
    temp_c: float | None


@dataclass(frozen=True, slots=True)
class SlotColumns:
    """Per engine slot (``[N * W]``, the state's flat device grid): the last fresh reading of each
    value, NaN where none (no card, no report, a stale one, or a value the probe cannot read)."""

    util_pct: FloatArray
    memory_mib_used: FloatArray
    power_w: FloatArray


PLAUSIBLE: tuple[tuple[float, float], ...] = (
    (0.0, 100.0),  # util_pct
    (0.0, float(1 << 30)),  # memory_mib_used: a PiB
    (0.0, 100_000.0),  # power_w
    (-100.0, 1000.0),  # temp_c
)
"""Per value, the range a reading must lie in to be kept: an agent's report is hostile input, and
one card reporting 1e308 W would turn every sum it joins into infinity (which JSON cannot
carry). A reading outside is kept as unread (NaN), as a value the probe could not read."""


def _value(v: float | int | None, bounds: tuple[float, float]) -> float:
    if v is None:
        return math.nan
    x = float(v)
    return x if bounds[0] <= x <= bounds[1] else math.nan


class LiveMetrics:
    """Per card UUID: the last reading (columns) and a ring of recent ones. Not thread-safe: call
    under the plane's lock, as the heartbeat that feeds it does."""

    def __init__(self, ring: int = RING, step_s: float = RING_STEP_S) -> None:
        if ring < 1:
            raise ValueError(f"ring must be at least 1, got {ring}")
        self.ring = ring
        self.step_s = step_s
        self._row: dict[str, int] = {}
        self._cap = 0
        self._at = np.zeros(0, np.float64)  # Unix time of each row's last reading
        self._last = np.zeros((0, len(VALUES)), np.float64)
        self._ring_t = np.zeros((0, ring), np.float64)
        self._ring_v = np.zeros((0, ring, len(VALUES)), np.float32)
        self._ring_n = np.zeros(0, np.int64)  # readings ever kept in each row's ring
        # ((the state, weakly; its epoch; rows then), rows, their slots): see ``_alignment``
        self._aligned: (
            tuple[
                tuple[weakref.ref[ClusterState], int, int],
                npt.NDArray[np.intp],
                npt.NDArray[np.intp],
            ]
            | None
        ) = None

    def __len__(self) -> int:
        return len(self._row)

    def _grow(self) -> None:
        cap = max(64, 2 * self._cap)
        extra = cap - self._cap
        self._at = np.concatenate([self._at, np.zeros(extra)])
        self._last = np.concatenate([self._last, np.full((extra, len(VALUES)), np.nan)])
        self._ring_t = np.concatenate([self._ring_t, np.zeros((extra, self.ring))])
        self._ring_v = np.concatenate(
            [self._ring_v, np.full((extra, self.ring, len(VALUES)), np.nan, np.float32)]
        )
        self._ring_n = np.concatenate([self._ring_n, np.zeros(extra, np.int64)])
        self._cap = cap

    def record(
        self,
        uuid: str,
        now: float,
        util_pct: float | None,
        memory_mib_used: float | None,
        power_w: float | None,
        temp_c: float | None,
    ) -> None:
        """Keep a card's reading: always as its last, and in its ring when ``step_s`` has passed
        since the ring's newest (or the ring is empty)."""
        row = self._row.get(uuid)
        if row is None:
            row = len(self._row)
            if row >= self._cap:
                self._grow()
            self._row[uuid] = row
            self._aligned = None
        given = (util_pct, memory_mib_used, power_w, temp_c)
        values = tuple(_value(v, b) for v, b in zip(given, PLAUSIBLE, strict=True))
        self._at[row] = now
        self._last[row] = values
        n = int(self._ring_n[row])
        newest = self._ring_t[row, (n - 1) % self.ring] if n else -math.inf
        if now - newest >= self.step_s:
            self._ring_t[row, n % self.ring] = now
            self._ring_v[row, n % self.ring] = values
            self._ring_n[row] = n + 1

    def last(self, uuid: str) -> Reading | None:
        """The card's last reading, whenever it came; None when it never reported."""
        row = self._row.get(uuid)
        if row is None:
            return None
        values = (None if math.isnan(float(x)) else float(x) for x in self._last[row])
        return Reading(float(self._at[row]), *values)

    def recent(self, uuid: str) -> list[Reading]:
        """The card's ring, oldest first; empty when it never reported."""
        row = self._row.get(uuid)
        if row is None:
            return []
        n = int(self._ring_n[row])
        order = [(n - k) % self.ring for k in range(min(n, self.ring), 0, -1)]
        out = []
        for i in order:
            v = self._ring_v[row, i]
            util, mem, power, temp = (None if math.isnan(float(x)) else float(x) for x in v)
            out.append(Reading(float(self._ring_t[row, i]), util, mem, power, temp))
        return out

    def keep_only(self, uuids: Iterable[str]) -> int:
        """Forget the rows of cards not in ``uuids`` (gone from the pool); returns how many."""
        keep = set(uuids)
        gone = [u for u in self._row if u not in keep]
        if not gone:
            return 0
        rows = np.asarray(sorted(self._row[u] for u in self._row if u in keep), np.intp)
        names = {r: u for u, r in self._row.items()}
        self._row = {names[int(r)]: i for i, r in enumerate(rows)}
        self._at = self._at[rows].copy()
        self._last = self._last[rows].copy()
        self._ring_t = self._ring_t[rows].copy()
        self._ring_v = self._ring_v[rows].copy()
        self._ring_n = self._ring_n[rows].copy()
        self._cap = len(rows)
        self._aligned = None
        return len(gone)

    def columns(
        self, state: ClusterState, now: float, stale_s: float = STALE_AFTER_S
    ) -> SlotColumns:
        """The last readings laid over ``state``'s flat device grid (see :class:`SlotColumns`).
        Column work only; the UUID -> slot alignment (a dict walk) is redone only when cards
        reported for the first time, or the engine's state or inventory changed."""
        size = state.n_nodes * state.width
        rows, slots = self._alignment(state)
        fresh = self._at[rows] >= now - stale_s
        out = np.full((size, len(VALUES)), np.nan)
        out[slots[fresh]] = self._last[rows[fresh]]
        return SlotColumns(out[:, 0], out[:, 1], out[:, 2])

    def _alignment(self, state: ClusterState) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        found = self._aligned
        if (
            found is None
            or found[0][0]() is not state
            or found[0][1:] != (state.epoch, len(self._row))
        ):
            pairs = [(r, state.uuid_slot[u]) for u, r in self._row.items() if u in state.uuid_slot]
            rows = np.asarray([p[0] for p in pairs], np.intp)
            slots = np.asarray([p[1] for p in pairs], np.intp)
            key = (weakref.ref(state), state.epoch, len(self._row))
            found = self._aligned = (key, rows, slots)
        return found[1], found[2]
