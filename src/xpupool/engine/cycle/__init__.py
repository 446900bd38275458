"""The scheduling cycle every front drives: queue order, quota admission, gangs and preemption.

The engine below places one request on the cluster state; the cycle decides which pending work to
try, in what order, under which quota, and whom to preempt, and returns its decisions. It does no
I/O: the server persists the decisions, the timed simulator advances its clock on them.
"""

from xpupool.engine.cycle.admission import (
    ANY,
    UNLISTED,
    Admission,
    Admitted,
    Preemption,
    QueueSpec,
    Quota,
    Refusal,
    Resource,
    Unlisted,
)
from xpupool.engine.cycle.cycle import Decision, Place, Preempt, SchedulingCycle, Wait
from xpupool.engine.cycle.elastic import ElasticBook, Growth, Shrink, grow, release_extras
from xpupool.engine.cycle.preempt import PreemptionPlan, minimal_victims, plan_preemption
from xpupool.engine.cycle.work import PendingWork, RunningWork, Stopping

__all__ = [
    "ANY",
    "UNLISTED",
    "Admission",
    "Admitted",
    "Decision",
    "ElasticBook",
    "Growth",
    "PendingWork",
    "Place",
    "Preempt",
    "Preemption",
    "PreemptionPlan",
    "QueueSpec",
    "Quota",
    "Refusal",
    "Resource",
    "RunningWork",
    "SchedulingCycle",
    "Shrink",
    "Stopping",
    "Unlisted",
    "Wait",
    "grow",
    "minimal_victims",
    "plan_preemption",
    "release_extras",
]
