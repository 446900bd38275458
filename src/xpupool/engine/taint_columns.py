"""The pool's node taints as columns, and what a request's tolerations leave of them.

Each distinct taint of the pool is one column of ``[N, T]`` booleans (a pool has a handful of
distinct taints however many nodes carry them). A request's tolerations are matched against the
``T`` distinct taints once, with Kubernetes' rule (``model/taint.py``), and the answer for all
nodes is a few array operations, kept per distinct tolerations: a stream of requests repeats a few.
Taints change only with a node's registration, which builds the state again, so the columns never
change in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.engine.lru import Lru
from xpupool.model.device import Node
from xpupool.model.taint import Taint, TaintEffect, Toleration, tolerated

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
ANSWERS_KEPT = 256  # distinct tolerations in use; the bound only stops a long-running pile-up


@dataclass(frozen=True, slots=True)
class TaintAnswer:
    """What a request's tolerations leave, per node: ``ok`` (``[N]``) no NoSchedule (or
    NoExecute) taint it does not tolerate; ``first`` (``[N]``, -1 where ok) the index in
    ``texts`` of one such taint (the first of the pool's distinct taints), for explanations;
    ``prefer`` (``[N]``) how many PreferNoSchedule taints it does not tolerate."""

    ok: BoolArray
    first: IntArray
    texts: tuple[str, ...]
    prefer: IntArray


class TaintColumns:
    """``taints[t]`` is column ``t`` of ``node_taint``; ``keeps_off`` says whether some node has
    a taint that keeps work off, ``prefers`` whether some node has a PreferNoSchedule one (each
    False: the filter or the scorer has nothing to say, and is skipped)."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        ids: dict[Taint, int] = {}
        cells = [
            (i, ids.setdefault(t, len(ids))) for i, node in enumerate(nodes) for t in node.taints
        ]
        self.taints: tuple[Taint, ...] = tuple(ids)
        self.texts = tuple(str(t) for t in self.taints)
        self.node_taint = np.zeros((len(nodes), len(ids)), np.bool_)
        for i, t in cells:
            self.node_taint[i, t] = True
        self._off = np.asarray([t.keeps_off for t in self.taints], np.bool_)
        self._soft = np.asarray(
            [t.effect is TaintEffect.PREFER_NO_SCHEDULE for t in self.taints], np.bool_
        )
        self.keeps_off = bool(self.node_taint[:, self._off].any())
        self.prefers = bool(self.node_taint[:, self._soft].any())
        self._answers: Lru[tuple[Toleration, ...], TaintAnswer] = Lru(ANSWERS_KEPT)

    def answer(self, tolerations: tuple[Toleration, ...]) -> TaintAnswer:
        """What ``tolerations`` leave of the pool's taints; made once per distinct tolerations."""
        found = self._answers.get(tolerations)
        if found is None:
            untolerated = np.asarray(
                [not tolerated(tolerations, t) for t in self.taints], np.bool_
            ).reshape(-1)
            hard = self.node_taint[:, untolerated & self._off]
            columns = np.flatnonzero(untolerated & self._off)
            ok: BoolArray = ~np.any(hard, axis=1)
            first = np.where(ok, -1, columns[hard.argmax(axis=1)] if columns.size else -1)
            prefer = self.node_taint[:, untolerated & self._soft].sum(axis=1, dtype=np.int64)
            found = self._answers.put(tolerations, TaintAnswer(ok, first, self.texts, prefer))
        return found
