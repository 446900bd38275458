"""xpupool's placement policy as composable plugins over one shared workload model.

The built-in profile ``xpupool`` (``engine/profile.py``) enables them all: FGD's fragmentation
delta at half resolution for one-card replicas (``fragmentation``), shares placed where the
workload's best packing would put them (``packing``), the fullest card among equals
(``fullest-card``), contended cards priced (``contention``), CPU-only replicas sent where CPU is
spare (``spare-cpu``), and among the near-best nodes the one after which the likeliest next tasks
still land best (``lookahead``, a post-score step). ``xpupool-fine`` keeps FGD's resolution and has
no packing or fullest-card terms; ``xpupool-greedy`` has no lookahead (both for comparison).

Each scorer is bounded 0..100 by a strictly increasing affine map of its own term, and the built-in
weights undo the maps' scales, so that the weighted sum orders nodes and cards as the single
score the policy was measured with did (``docs/placement-policy.md``):

    fragmentation + packing + 0.0001 * fullest-card + 6.4 * contention + 0.005 * spare-cpu
    = primary - 100 * loss + 0.01 * tight - 0.025 * displaced + 0.5 * spare + constant

A one-card replica is rated per card (:class:`~xpupool.engine.scorers.base.CardScorer`): the
pipeline takes per node the card with the best weighted sum, and the engine places it there. All
plugins read the engine's :class:`~xpupool.engine.fragmentation.workload_model.WorkloadModel`
(the target workload, given or learned online, and what is built on it), and one request's
fragmentation before and after is computed once, in its ``ctx.cycle``.
"""

from xpupool.engine.scorers.xpupool.contention import Contention
from xpupool.engine.scorers.xpupool.fragmentation import FragmentationArgs, FragmentationDelta
from xpupool.engine.scorers.xpupool.fullest_card import FullestCard
from xpupool.engine.scorers.xpupool.lookahead import LookaheadArgs, LookaheadStep
from xpupool.engine.scorers.xpupool.packing import PackingLoss
from xpupool.engine.scorers.xpupool.spare_cpu import SpareCpu

__all__ = [
    "Contention",
    "FragmentationArgs",
    "FragmentationDelta",
    "FullestCard",
    "LookaheadArgs",
    "LookaheadStep",
    "PackingLoss",
    "SpareCpu",
]
