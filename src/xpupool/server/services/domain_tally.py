"""Each site's link domains with their nodes and cards (issue 51): the one tally that
``GET /v1/sites``, the fleet overview and ``/metrics`` all show, so the three agree.

A node's domain is the one the engine holds (``Node.link_domain``, set by its site's front from
the site's ``link_domain_label``: ``engine/link_domains.py``); a node without one is in its
site's unnamed domain (``name`` None). Per node the cards are counted from the state's columns,
so a call walks the node records once and never the cards.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.nodes import NodeStatus


@dataclass(frozen=True, slots=True)
class DomainTally:
    """One link domain of one site. ``devices_free``: cards with nothing allocated on its
    schedulable nodes (ready, not cordoned), as ``GET /v1/nodes`` counts a node's free cards;
    ``devices_allocated``: cards some job holds a share of, on any of its nodes."""

    site: str
    name: str | None
    nodes: int
    devices: int
    devices_free: int
    devices_allocated: int


def domain_tally(plane: ControlPlane) -> list[DomainTally]:
    """Every site's domains, by site then name (the unnamed one last in its site). Call under
    the plane's lock (``plane.read``)."""
    st = plane.cluster_state
    unheld = (
        (st.dev_mem_free == st.dev_mem_commit) & (st.dev_core_free == st.dev_core_commit)
    ) & st.dev_present
    cards = st.dev_present.sum(axis=1)
    free = unheld.sum(axis=1)
    # (site, name) -> [nodes, devices, devices free, devices allocated]
    sums: dict[tuple[str, str | None], list[int]] = {}
    for name, rec in plane.node_records.items():
        row = st.node_index.get(name)
        if row is None:
            continue
        schedulable = not rec.cordoned and rec.status is NodeStatus.READY
        acc = sums.setdefault((rec.node.site, st.nodes[row].link_domain), [0, 0, 0, 0])
        acc[0] += 1
        acc[1] += int(cards[row])
        acc[2] += int(free[row]) if schedulable else 0
        acc[3] += int(cards[row] - free[row])
    return [
        DomainTally(site, name, *acc)
        for (site, name), acc in sorted(
            sums.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or "")
        )
    ]


def any_named(plane: ControlPlane) -> bool:
    """Whether some node of the pool has a link domain: the engine keeps one key per site and
    domain (``site/value`` for a named one), so this reads a handful of keys, never the nodes.
    The overview and ``/metrics`` show domains only then, and skip the tally's walk otherwise.
    Call under the plane's lock."""
    return any("/" in key for key in plane.cluster_state.link_domains.keys)


def named_sites(tally: list[DomainTally]) -> set[str]:
    """The sites that name some domain: only their domains are worth showing (a site without
    any is one domain, the site itself)."""
    return {d.site for d in tally if d.name is not None}


__all__ = ["DomainTally", "any_named", "domain_tally", "named_sites"]
