"""What the fragmentation measure and the scorers need of the pipeline: a request's context, the
devices its selectors accept and the nodes it fits now.

A protocol, so that ``engine/fragmentation/`` and ``engine/scorers/`` can name the pipeline's part
they use without importing ``engine/pipeline.py``, whose registry imports the scorers (which import
the measure): :class:`~xpupool.engine.pipeline.Pipeline` is the one implementation.
"""

from __future__ import annotations

from typing import Protocol

from xpupool.engine.context import Context
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.request import Request


class Eligibility(Protocol):
    """Requests resolved against one :class:`ClusterState`."""

    @property
    def state(self) -> ClusterState: ...

    def context(self, req: Request) -> Context:
        """The request's per-device needs (memory in MiB per card, compute, count)."""
        ...

    def eligible(self, ctx: Context) -> BoolArray:
        """``[N, W]`` devices the request's selectors accept, ignoring free capacity."""
        ...

    def filter(self, ctx: Context) -> BoolArray:
        """``[N]`` nodes that can take one replica now; also sets ``ctx.dev_fit``."""
        ...
