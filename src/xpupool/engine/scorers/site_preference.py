"""Site preference (``prefer-site=beijing``): the nodes of the preferred site score 100, the others
0, so they win when they fit and the others still take the request when they do not.

A :class:`~xpupool.engine.scorers.base.Preference`: the engine adds it to the sum only for a
request that states a preferred site, so requests without one are placed exactly as by the
profile's other scorers. Its weight in a profile says how strong the preference is; the built-in
profiles weigh it above all their other scorers together (``engine/profile.py``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.base import MAX_SCORE
from xpupool.engine.state import FloatArray
from xpupool.model.request import Request


class SitePreference:
    name: ClassVar[str] = "site"

    def wanted(self, req: Request) -> bool:
        return req.preferred_site is not None

    def score(self, ctx: Context) -> FloatArray:
        site = ctx.req.preferred_site
        if site is None:
            return np.zeros(ctx.state.n_nodes, np.float64)
        result: FloatArray = np.where(ctx.state.site_mask((site,)), MAX_SCORE, 0.0)
        return result
