"""Starting replicas: one launch specification, carried out by a back end.

``build_spec`` decides everything about a replica (uid, environment, working directory, limits,
log); a :class:`Backend` (``backend_for(name)``) starts it and controls it. See
docs/security.md, "Jobs: what a job can and cannot see".
"""

from xpupool.agent.launch.backend import Backend, Launched, backend_for, backend_names
from xpupool.agent.launch.cgroups import CgroupHost, CgroupPlan, detect_cgroups
from xpupool.agent.launch.identity import DEFAULT_UID_RANGE, UidRange
from xpupool.agent.launch.process import ProcessBackend, group_alive, start_process
from xpupool.agent.launch.spec import (
    DEFAULT_LOG_CAP_BYTES,
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    build_spec,
)

__all__ = [
    "DEFAULT_LOG_CAP_BYTES",
    "DEFAULT_UID_RANGE",
    "Backend",
    "CgroupHost",
    "CgroupPlan",
    "LaunchError",
    "LaunchSettings",
    "LaunchSpec",
    "Launched",
    "ProcessBackend",
    "UidRange",
    "backend_for",
    "backend_names",
    "build_spec",
    "detect_cgroups",
    "group_alive",
    "start_process",
]
