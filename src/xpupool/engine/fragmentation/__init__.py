"""FGD's fragmentation of a target workload and what the xpupool policy builds on it.

- ``kernels``: the compiled inner loops (Numba) of the measure and of the prices' knapsack; ``warm``
- ``measure``: the target workload, its shape table and the fragmentation measure in plain NumPy
- ``cache``: the measure kept current per node (:class:`FragmentationCache`)
- ``after``: the measure after placing a replica, kept per request amounts (:class:`AfterPlacement`)
- ``lookahead``: the one-step lookahead among near-best placements (:class:`Lookahead`)
- ``pressure``: how contended each device is by the target workload (:class:`DevicePressure`)
- ``prices``: cutting-stock prices of the workload's shares (:class:`SharePrices`)
- ``stranded``: idle device capacity no shape of the workload can use (:func:`stranded_capacity`)
- ``workload_model``: the target workload and all of the above built on it, shared by xpupool's
  plugins and learned online when not given (:class:`WorkloadModel`)

Each module imports only those above it (``kernels`` none of them: it takes the shape table's
arrays, not the table), and none imports the pipeline or the scorers: the measure sees the pipeline
as an :class:`~xpupool.engine.eligibility.Eligibility`. ``tests/unit/engine/test_import_graph.py``
keeps it so.
"""

from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.lookahead import CANDIDATES, Lookahead
from xpupool.engine.fragmentation.measure import (
    NEVER,
    SETTLE,
    IndexArray,
    NodeView,
    ShapeTable,
    TargetWorkload,
    cpu_capped,
    expected_fragment,
    fragmentation,
    node_view,
    settled,
    shape_fits,
)
from xpupool.engine.fragmentation.pressure import DevicePressure
from xpupool.engine.fragmentation.prices import SharePrices
from xpupool.engine.fragmentation.stranded import Stranded, stranded_capacity

__all__ = [
    "CANDIDATES",
    "NEVER",
    "SETTLE",
    "DevicePressure",
    "FragmentationCache",
    "IndexArray",
    "Lookahead",
    "NodeView",
    "ShapeTable",
    "SharePrices",
    "Stranded",
    "TargetWorkload",
    "cpu_capped",
    "expected_fragment",
    "fragmentation",
    "node_view",
    "settled",
    "shape_fits",
    "stranded_capacity",
]
