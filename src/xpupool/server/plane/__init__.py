"""The control plane: one engine, the books of nodes and jobs, the store, and one lock.

``control.py`` holds :class:`ControlPlane` (the engine host, the job books, the writes), with its
node book in ``nodes.py`` (registrations in ``registration.py``), its tenant, queue and token books
in ``tenancy.py``, the tenant and token rows it writes in ``tenant_store.py``, and the read
operations that take the lock themselves in ``reads.py``: every book is reached through methods.
``node_lifecycle.py`` is the one function that moves a node (ready, lost, cordoned, draining,
deleting), as ``server/job_lifecycle.py`` moves a job; ``records.py`` holds the books' entries,
``store.py`` the plane's rows (converters and the SQL it runs), and ``lock.py`` the lock, private to
the package: outside it, named operations take it (an agent's reports in ``agent_reports.py``, a
scheduling pass's steps in ``scheduling_pass.py``, submissions in ``submissions.py``, a Kubernetes
site's changes in ``site_runs.py``, a token's first use in ``token_binding.py``), and a source
test, tests/unit/server/test_plane_lock_boundary.py, keeps ``ControlPlane.locked()`` and
``ControlPlane.write()`` inside the package. Every other module imports from here.
"""

from xpupool.server.plane.control import (
    DEFAULT_HISTORY_INTERVAL_S,
    DEFAULT_MAX_LOG_BYTES,
    SEED_JOBS,
    ControlPlane,
    check_request_names,
)
from xpupool.server.plane.records import (
    STOPPING,
    Built,
    HeldJob,
    NodeRecord,
    PendingJob,
    carry_transients,
)
from xpupool.server.plane.store import (
    allocation_from_dict,
    allocation_to_dict,
    device_from_dict,
    device_to_dict,
    drain_target,
    gang_request,
    held_from_row,
    node_from_row,
    node_values,
    pending_from_row,
    taints_from_row,
    taints_to_row,
    tenant_weights,
)

__all__ = [
    "DEFAULT_HISTORY_INTERVAL_S",
    "DEFAULT_MAX_LOG_BYTES",
    "SEED_JOBS",
    "STOPPING",
    "Built",
    "ControlPlane",
    "HeldJob",
    "NodeRecord",
    "PendingJob",
    "allocation_from_dict",
    "allocation_to_dict",
    "carry_transients",
    "check_request_names",
    "device_from_dict",
    "device_to_dict",
    "drain_target",
    "gang_request",
    "held_from_row",
    "node_from_row",
    "node_values",
    "pending_from_row",
    "taints_from_row",
    "taints_to_row",
    "tenant_weights",
]
