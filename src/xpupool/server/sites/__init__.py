"""Sites: where the plane's nodes live and its work runs, behind one protocol.

``protocol.py`` defines :class:`Site`, what a site implements (its nodes as the engine host takes
them, start and stop of the work the scheduler decided), and :class:`Sites`, the registry the plane
holds (site name -> Site). ``agent_pool.py`` is the first implementation: today's pool of
``xpupool agent`` nodes (and the cluster file's simulated ones). A Kubernetes implementation lives
in ``k8s/`` and is handed to the plane by ``xpupool up``; ``server/`` never imports ``k8s/``
(tests/unit/server/test_sites_layers.py). docs/sites.md says how the pieces fit.
"""

from xpupool.server.sites.agent_pool import AGENT_POOL, AgentPoolSite
from xpupool.server.sites.protocol import (
    ActiveSite,
    SecretReader,
    Site,
    Sites,
    UnknownSiteError,
    WatchedSite,
)

__all__ = [
    "AGENT_POOL",
    "ActiveSite",
    "AgentPoolSite",
    "SecretReader",
    "Site",
    "Sites",
    "UnknownSiteError",
    "WatchedSite",
]
