"""Gangs stay in one site: which gangs must, and how many of their replicas each site could take.

A gang's replicas work together (collectives, pipeline stages); across sites they talk over the
links between sites, so a gang spread over three sites because each had a few free cards runs at
the pace of the slowest link, or not at all (issue 42). A gang is therefore placed wholly within
one site unless its request says it may span sites (``span_sites``, the compact ``span-sites``).
Replicas that are not a gang stand alone and go wherever each fits. The rule asks nothing of a
pool of one site, nor of a gang whose own site list leaves it one: the engine then places as it
always did. Otherwise the room bound of ``gang_bound.py`` (one filter pass), summed per site, says
which sites could hold the whole gang now; the engine places the first replica where its profile
scores best among those sites and the others in the site it chose (``Engine._place_all``), so the
profile still picks the nodes and the site follows from its choice. The same sums on the empty
pool give the verdict when no single site ever could (``verdict.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from xpupool.engine.gang_bound import Room, room_refusal
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.reasons import Unschedulable
from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.model.request import Request

SPAN_HINT = "span-sites"
"""The compact syntax's flag that lets a gang span sites, named in refusals."""


def keeps_to_one_site(state: ClusterState, req: Request) -> bool:
    """Whether ``req`` is a gang that must stay in one site while more than one site of the pool
    is open to it (:func:`open_sites`): only then is a site chosen."""
    if not req.gang or req.replicas < 2 or req.span_sites or len(state.sites) < 2:
        return False
    return len(open_sites(state, req)) > 1


def open_sites(state: ClusterState, req: Request) -> list[str]:
    """The sites of the pool that ``req``'s ``sites`` and ``exclude_sites`` let it use, in the
    pool's order."""
    return [
        s for s in state.sites if (not req.sites or s in req.sites) and s not in req.exclude_sites
    ]


def site_rooms(state: ClusterState, room: Room) -> IntArray:
    """``[S]`` (the order of ``state.sites``) how many replicas each site could take at once: the
    room's per-node bounds summed over the site's nodes that one replica fits."""
    fit = room.fit
    sums = np.bincount(state.node_site[fit], room.per_node[fit], minlength=len(state.sites))
    return sums.astype(np.int64)


def largest_site(state: ClusterState, rooms: IntArray) -> tuple[str, int]:
    """The site whose room is largest (the first of equals, in the pool's order) and its room."""
    best = int(np.argmax(rooms))
    return state.sites[best], int(rooms[best])


def within_sites(req: Request, sites: Sequence[str]) -> Request:
    """``req`` kept to ``sites``: its site list narrowed to them, so the NodeSite filter (one mask
    per distinct list, ``ClusterState.site_mask``) keeps its replicas there."""
    return replace(req, sites=tuple(sites), exclude_sites=())


def no_site_refusal(
    pipeline: Pipeline, req: Request, within: BoolArray | None, room: Room, rooms: IntArray
) -> Unschedulable:
    """Gang ``req`` refused because no single site could take all its replicas now, though the
    pool as a whole could: the site that could take the most says how far off it is."""
    site, most = largest_site(pipeline.state, rooms)
    note = (
        f"gang: no single site holds {req.replicas} replicas at once (the most: {site}, {most}); "
        f"{SPAN_HINT} lets it span sites"
    )
    return room_refusal(pipeline, req, within, room, most, note)
