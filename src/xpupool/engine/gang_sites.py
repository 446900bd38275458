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
pool give the verdict when no single site ever could (``verdict.py``). Inside a site that names
a link domain (a zone, a network block: ``link_domains.py``) the gang is kept to one domain the
same way, the sums taken per domain: so the unit is a domain, which is the whole site where the
site names none; ``span_sites`` lifts both.
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
    """Whether ``req`` is a gang that must stay in one domain while more than one is open to it:
    more than one site (:func:`open_sites`), or a site of several link domains. Only then is a
    domain chosen."""
    if not req.gang or req.replicas < 2 or req.span_sites:
        return False
    domains = state.link_domains
    if len(state.sites) < 2 and not domains.split:
        return False
    sites = open_sites(state, req)
    return len(sites) > 1 or any(domains.site_split[state.sites.index(s)] for s in sites)


def open_domains(state: ClusterState, req: Request) -> list[str]:
    """The keys of the link domains (whole sites where a site names none) of the sites open to
    ``req`` (:func:`open_sites`), in the pool's order: where a gang kept together may go."""
    domains = state.link_domains
    open_ids = {state.sites.index(s) for s in open_sites(state, req)}
    site_of = domains.domain_site.tolist()
    return [k for k, i in zip(domains.keys, site_of, strict=True) if i in open_ids]


def domain_rooms(state: ClusterState, room: Room) -> IntArray:
    """``[D]`` (the order of ``state.link_domains.keys``) how many replicas each link domain
    could take at once: the room's per-node bounds summed over the domain's nodes that one
    replica fits."""
    fit = room.fit
    node_domain = state.link_domains.node_domain
    n = len(state.link_domains.keys)
    return np.bincount(node_domain[fit], room.per_node[fit], minlength=n).astype(np.int64)


def largest_domain(state: ClusterState, rooms: IntArray) -> tuple[str, int]:
    """The domain whose room (:func:`domain_rooms`) is largest (the first of equals) and it."""
    best = int(np.argmax(rooms))
    return state.link_domains.keys[best], int(rooms[best])


def domain_word(state: ClusterState) -> str:
    """What a refusal calls the unit a gang is kept to: a link domain where some site has
    several, else a site."""
    return "link domain" if state.link_domains.split else "site"


def within_domains(state: ClusterState, req: Request, keys: Sequence[str]) -> Request:
    """``req`` kept to the link domains ``keys``: to their sites (:func:`within_sites`) and,
    where one of those sites has several domains, to their nodes (``Request.link_domains``,
    which the NodeSite filter reads)."""
    domains = state.link_domains
    site_ids = [int(domains.domain_site[domains.index[k]]) for k in keys]
    sites = tuple(dict.fromkeys(state.sites[i] for i in site_ids))
    split = any(domains.site_split[i] for i in site_ids)
    return replace(req, sites=sites, exclude_sites=(), link_domains=tuple(keys) if split else ())


def open_sites(state: ClusterState, req: Request) -> list[str]:
    """The sites of the pool that ``req``'s ``sites`` and ``exclude_sites`` let it use, in the
    pool's order."""
    return [
        s for s in state.sites if (not req.sites or s in req.sites) and s not in req.exclude_sites
    ]


def within_sites(req: Request, sites: Sequence[str]) -> Request:
    """``req`` kept to ``sites``: its site list narrowed to them, so the NodeSite filter (one mask
    per distinct list, ``ClusterState.site_mask``) keeps its replicas there."""
    return replace(req, sites=tuple(sites), exclude_sites=())


def no_site_refusal(
    pipeline: Pipeline, req: Request, within: BoolArray | None, room: Room, rooms: IntArray
) -> Unschedulable:
    """Gang ``req`` refused because no single domain (:func:`domain_rooms`: ``rooms``) could
    take all its replicas now, though the pool as a whole could: the domain that could take the
    most says how far off it is."""
    state = pipeline.state
    where, most = largest_domain(state, rooms)
    note = (
        f"gang: no single {domain_word(state)} holds {req.replicas} replicas at once "
        f"(the most: {where}, {most}); {SPAN_HINT} lets it span sites"
    )
    return room_refusal(pipeline, req, within, room, most, note)
