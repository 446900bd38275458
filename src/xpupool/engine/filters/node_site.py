"""A request that names sites (``site=beijing``, ``site=!shanghai``) runs only on their nodes.

The mask comes from :meth:`ClusterState.site_mask`, made once per distinct ask, so a request
costs a dictionary lookup, not a pass over the nodes. A gang kept to link domains
(``Request.link_domains``, set by the engine: ``gang_sites.py``) runs only on their nodes too.
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
        if req.link_domains:
            domains = state.link_domains.mask(req.link_domains)
            return domains & state.site_mask(req.sites, req.exclude_sites)
        if not req.sites and not req.exclude_sites:
            return None
        return state.site_mask(req.sites, req.exclude_sites)

    def why(self, req: Request) -> tuple[Reason, str]:
        """Named sites: "not in site beijing"; only exclusions: "in excluded site shanghai";
        link domains: "not in site gpu-a/zone-1"."""
        if req.link_domains:
            return Reason.SITE_NOT_ALLOWED, " or ".join(req.link_domains)
        if req.sites:
            return Reason.SITE_NOT_ALLOWED, " or ".join(req.sites)
        return Reason.SITE_EXCLUDED, " or ".join(req.exclude_sites)
