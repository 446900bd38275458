"""When a front that defers its engine's online learning (``Engine.defer_learning``) re-learns.

Re-learning the online workload rebuilds the measure, the pressure and the lookahead over every
node (with the warm-up ``Engine.relearn(warm=True)`` does: its cost grows with the pool), and a
fresh engine finds its workload changed every few requests. Inline, that cost lands on whichever
request made the change due. The fronts re-learn between requests instead, paced here: at most
once every ``every_s`` (the first time at once), and not right after requests arrived (the next
one is about to be placed), for ``wait_s`` at most. Placing the requests of the next second on a
workload learned a second ago moves little: FGD's measure is an expectation over its shapes.
The embedded server's scheduling loop and the Kubernetes extender's learner thread both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.engine.engine import Engine

EVERY_S = 1.0
"""Seconds between two re-learns, at least (the first is not put off)."""
WAIT_S = 0.5
"""Seconds a due re-learn is put off at most, beyond that, while requests keep arriving."""


@dataclass(slots=True)
class LearningPace:
    every_s: float = EVERY_S
    wait_s: float = WAIT_S
    relearned_at: float | None = None
    """When the last re-learn ran (the front's clock)."""
    due_since: float | None = None
    """When a due re-learn was first put off for arrivals (None: none is)."""

    def tick(self, engine: Engine, now: float, arrived: bool, warm: bool = True) -> bool:
        """Re-learn ``engine``'s workload now, and build on a new one what the next placements
        would, if that is due and the pace allows; ``arrived``: requests came since the last
        tick. Whether it re-learned."""
        if not engine.learning_due:
            self.due_since = None
            return False
        last = self.relearned_at
        if last is not None and now - last < self.every_s:
            return False  # a later tick finds it due
        since = self.due_since
        if arrived and (since is None or now - since < self.wait_s):
            self.due_since = now if since is None else since
            return False
        self.due_since = None
        self.relearned_at = now
        engine.relearn(warm=warm)
        return True
