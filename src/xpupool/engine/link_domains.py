"""Link domains: the parts of a site whose nodes share a fast network, where the site names them.

A site may name a node label as its link domain (a Kubernetes zone, a network block: the sites
file's ``link_domain_label``); its front then gives each node the label's value as
``Node.link_domain``. A gang kept to one site is then kept to one domain of it too, since across
domains its replicas talk over the slower links between them (``gang_sites.py``). A domain's key
is ``site/value``; a site that names no label, and a node of a site that does but lacks the label,
is in the site-wide domain keyed by the site's name alone (site names hold no ``/``), so a pool
without domains has exactly one domain per site and gangs are placed as before. The columns are
made once per build of the state, as its sites are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from xpupool.engine.lru import Lru
from xpupool.model.device import Node

__all__ = ["LinkDomains", "domain_key", "labelled"]

BoolArray = npt.NDArray[np.bool_]  # as state.py's, which imports this module


def domain_key(node: Node) -> str:
    """The key of ``node``'s link domain: ``site/value``, or the site's name when none."""
    return node.site if node.link_domain is None else f"{node.site}/{node.link_domain}"


class LinkDomains:
    """Per node its domain (``node_domain`` ``[N]``, an index of ``keys``); per domain its site
    (``domain_site``, an index of the state's sites)."""

    def __init__(
        self, nodes: Sequence[Node], node_site: npt.NDArray[np.int32], n_sites: int
    ) -> None:
        self.keys: list[str] = []
        index: dict[str, int] = {}
        self.node_domain = np.zeros(len(nodes), np.int32)
        site_of: list[int] = []
        for i, node in enumerate(nodes):
            key = domain_key(node)
            found = index.get(key)
            if found is None:
                found = index[key] = len(self.keys)
                self.keys.append(key)
                site_of.append(int(node_site[i]))
            self.node_domain[i] = found
        self.index = index
        self.domain_site = np.asarray(site_of, np.int32)
        per_site = np.bincount(self.domain_site, minlength=n_sites)
        self.site_split: BoolArray = per_site > 1  # [S] sites of more than one domain
        self._masks: Lru[tuple[str, ...], BoolArray] = Lru(256)

    @property
    def split(self) -> bool:
        """Whether some site has more than one domain (else the rule is the one-site rule)."""
        return bool(self.site_split.any())

    def key_of(self, node_index: int) -> str:
        """The key of the domain of the state's node ``node_index``."""
        return self.keys[int(self.node_domain[node_index])]

    def mask(self, keys: tuple[str, ...]) -> BoolArray:
        """``[N]`` nodes in one of the domains ``keys`` (an unknown key matches nothing); made
        once per distinct ask."""
        found = self._masks.get(keys)
        if found is None:
            ids = [self.index[k] for k in keys if k in self.index]
            found = self._masks.put(keys, np.isin(self.node_domain, ids))
        return found


def labelled(node: Node, label: str | None) -> Node:
    """``node`` in the link domain its site's ``label`` names (the label's value; None when the
    node lacks it, or the site names no label): what a front that reads its site's
    ``link_domain_label`` hands the engine. ``node`` itself when that changes nothing."""
    domain = (node.labels.get(label) or None) if label is not None else None
    return node if domain == node.link_domain else replace(node, link_domain=domain)
