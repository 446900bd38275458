"""Dispatch to a site: what the scheduling cycle keeps to choose, for a pending job that leaves
more than one site of the pool open, the one site it is sent to (issue 51).

A job is dispatched once, the first time a pass tries it, as a multi-cluster manager dispatches
(MultiKueue), and then waits for that site alone: the expected wait of the rule is a position in
a site's queue, which means something only when jobs are queued for one site each. The rule
itself is :class:`~xpupool.engine.site_choice.SiteChooser`'s; this holds what it needs across
passes: the links and datasets of the sites file, the run times learned per shape from the jobs
that finished, and the chooser over the engine served (made again when the engine is rebuilt or
the network replaced, since it caches verdicts over the engine's state). The caller counts the
jobs already queued per site and shape (the server's pending jobs, the simulator's dispatch) and
keeps the chosen site apart from the sites the job allowed, so a lost site can send it elsewhere.
"""

from __future__ import annotations

from xpupool.engine.engine import Engine
from xpupool.engine.site_choice import RunTimes, SiteChooser
from xpupool.model.site_network import SiteNetwork

__all__ = ["SiteDispatch"]


class SiteDispatch:
    """The network, the learned run times and the chooser of one front's site choice."""

    def __init__(self, network: SiteNetwork | None = None) -> None:
        self.network = network or SiteNetwork()
        self.runtimes = RunTimes()
        # the sites the front's site health found unreachable at its last round (their nodes
        # all lost, so the chooser takes none of them: ``SiteChooser``, sites taking new work)
        self.unreachable: frozenset[str] = frozenset()
        self._chooser: SiteChooser | None = None

    def chooser(self, engine: Engine) -> SiteChooser:
        """The chooser over ``engine`` and the current network (made anew when either changed)."""
        found = self._chooser
        if found is None or found.engine is not engine or found.network is not self.network:
            found = self._chooser = SiteChooser(engine, self.network, self.runtimes)
        return found
