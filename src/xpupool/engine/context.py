"""Per-request working data shared by filters, scorers and the device picker.

Built once per replica attempt; holds the request's resolved per-device needs and the masks the
pipeline computed, so that scorers and the picker reuse them instead of recomputing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xpupool.engine.state import BoolArray, ClusterState, CountArray, IntArray
from xpupool.model.request import Request


@dataclass(slots=True)
class Context:
    """``need_mib`` is an int when memory was asked in MiB, else an ``[N, W]`` array of MiB per card
    (a share of each card's size, rounded down so that n shares of 1/n always fit). ``within``
    narrows the devices beyond the request's own selectors, for callers such as admission.
    ``filters_off`` names the filters the request's profile turns off (``registry.filter_chain``).
    ``cycle`` is what plugins keep for this replica attempt, by plugin name (kube's CycleState): a
    scorer's working data for its post-score step, say; it dies with the context. ``cards`` is
    ``[N]`` the card the profile's card scorers chose per node for a one-card replica (-1 where
    none), once the pipeline has combined their scores."""

    req: Request
    state: ClusterState
    k: int
    need_mib: int | IntArray
    need_core: int
    eligible: BoolArray | None = None
    dev_fit: BoolArray | None = None
    node_fit: BoolArray = field(default_factory=lambda: np.zeros(0, np.bool_))
    group_best: CountArray | None = None
    passed: CountArray | None = None  # [3, N] the shape's cards passing each capacity part
    within: BoolArray | None = None  # [N, W] devices the caller allows (a quota flavour), or all
    # [N, W] cards where a guaranteed share keeps within physical capacity (physical_room.py);
    # None: the rule does not apply to this request or pool
    physical: BoolArray | None = None
    filters_off: frozenset[str] = frozenset()
    cycle: dict[str, object] = field(default_factory=dict)
    cards: IntArray | None = None
    _candidates: IntArray | None = field(default=None, init=False, repr=False)
    _candidates_of: BoolArray | None = field(default=None, init=False, repr=False)

    def candidates(self) -> IntArray:
        """The fitting nodes, ``np.flatnonzero(node_fit)``: found once per ``node_fit`` (the
        pipeline's choice, the scorers and the measure each ask; at 5,000 nodes each search
        costs several microseconds)."""
        if self._candidates_of is not self.node_fit or self._candidates is None:
            self._candidates = np.flatnonzero(self.node_fit)
            self._candidates_of = self.node_fit
        return self._candidates
