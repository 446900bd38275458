"""A scorer rates every node for one replica: ``[N]`` floats in 0..100, higher is better.

Scores are computed for all nodes at once; the engine ignores nodes that did not pass the filters.
Weights live in profiles (``engine/profile.py``), never in scorers.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray

MAX_SCORE = 100.0


class Scorer(Protocol):
    name: ClassVar[str]

    def score(self, ctx: Context) -> FloatArray: ...
