"""A request that names sites (``site=beijing``, ``site=!shanghai``) runs only on their nodes.

The mask comes from :meth:`ClusterState.site_mask`, made once per distinct ask, so a request
costs a dictionary lookup, not a pass over the nodes.
"""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class NodeSite:
    name: ClassVar[str] = "NodeSite"
    reason: ClassVar[Reason] = Reason.SITE_NOT_ALLOWED

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None:
        if not req.sites and not req.exclude_sites:
            return None
        return state.site_mask(req.sites, req.exclude_sites)

    def why(self, req: Request) -> tuple[Reason, str]:
        """Named sites: "not in site beijing"; only exclusions: "in excluded site shanghai"."""
        if req.sites:
            return Reason.SITE_NOT_ALLOWED, " or ".join(req.sites)
        return Reason.SITE_EXCLUDED, " or ".join(req.exclude_sites)
