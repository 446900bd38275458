"""The placement engine: columnar cluster state, filter and scorer plugins, one pipeline.

No I/O and no knowledge of HTTP, SQL, Kubernetes or trace formats: every front turns its input into
:class:`~xpupool.model.Request` and :class:`ClusterState` updates and calls :meth:`Engine.place`.
"""

from xpupool.engine.allocation_ids import AllocationIds
from xpupool.engine.engine import Engine, Placement
from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE, Profile, make_profile
from xpupool.engine.reasons import Reason, ReasonCount, Unschedulable
from xpupool.engine.state import ClusterState
from xpupool.engine.txn import Transaction

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_PROFILE",
    "AllocationIds",
    "ClusterState",
    "Engine",
    "Placement",
    "Profile",
    "Reason",
    "ReasonCount",
    "Transaction",
    "Unschedulable",
    "make_profile",
]
