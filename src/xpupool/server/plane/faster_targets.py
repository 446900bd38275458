"""What the plane keeps of its moves to faster cards (``faster_moves.py``) and of its
consolidation in quiet periods (``consolidation_moves.py``), apart from the code that makes them
so that the plane's state can name it without importing that code."""

from __future__ import annotations

from dataclasses import dataclass, field

from xpupool.engine.cycle.admission import Admission, Admitted
from xpupool.engine.cycle.consolidate import Consolidation
from xpupool.engine.cycle.faster_cards import FasterCards


@dataclass(slots=True)
class PlaneFaster:
    """The plane's moves to faster cards: the cycle's option (``cards``) and, per moved job
    not placed again yet, the books its new cards were admitted in and that admission."""

    cards: FasterCards
    targets: dict[int, tuple[Admission, Admitted]] = field(default_factory=dict)


@dataclass(slots=True)
class PlaneConsolidation:
    """The plane's consolidation in quiet periods: the cycle's option (``step``) and, as
    :class:`PlaneFaster` keeps them, the cards admitted for each moved job not placed again yet."""

    step: Consolidation
    targets: dict[int, tuple[Admission, Admitted]] = field(default_factory=dict)
