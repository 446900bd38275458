"""PreferNoSchedule taints (kube's TaintToleration score): a node scores less the more of them the
request does not tolerate, 100 with none, 0 with the most any candidate has (kube's reverse
normalisation over the nodes that passed the filters).

A pool without such taints, or candidates that all have as many, tell nodes apart by nothing: the
scorer is then skipped (None), so placements stay exactly those of the profile's other scorers. It
scores whole nodes only (no ``score_on``): a profile of node scorers alone (binpack) keeps its
cheaper sum over every node (``Pipeline.weighted``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.base import MAX_SCORE
from xpupool.engine.state import FloatArray, IntArray


class TaintToleration:
    name: ClassVar[str] = "taint-toleration"

    def score(self, ctx: Context) -> FloatArray | None:
        counts = self._counts(ctx)
        if counts is None:
            return None
        return _reversed(counts, counts[ctx.node_fit])

    @staticmethod
    def _counts(ctx: Context) -> IntArray | None:
        columns = ctx.state.taint_columns
        return columns.answer(ctx.req.tolerations).prefer if columns.prefers else None


def _reversed(counts: IntArray, among: IntArray) -> FloatArray | None:
    """100 x (most - count) / most, ``most`` the largest of ``among``; None when all are alike."""
    if not among.size or int(among.max()) == int(among.min()):
        return None
    most = float(among.max())
    result: FloatArray = MAX_SCORE * (most - np.minimum(counts, most)) / most
    return result
