"""Link domains as Prometheus gauges (issue 51): per site and domain, its nodes and cards, from
the tally ``GET /v1/sites`` and the fleet overview show (``services/domain_tally.py``), so the
gauges and those views agree.

Agents name their labels, so a hostile or broken pool could name thousands of domains; the
exposition must not grow with them. At most ``MAX_DOMAIN_SERIES`` domains are named, those with
the most cards (then by site and name); the rest are summed into one series labelled
``site="(other)", domain="(other)"``, so each family has at most ``MAX_DOMAIN_SERIES + 1``
series whatever the pool names. A node without its site's label is in ``domain=""``. Neither
can be forged by an agent, whose label values are free text: a duplicate series would make
Prometheus refuse the whole scrape, but an empty label value puts a node in no domain
(``engine/link_domains.py``), and no site may be named ``(other)`` (``schemas/base.py`` Name).
Nothing is exported while no node has a domain: the per-site families say the rest.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from xpupool.server.services.domain_tally import DomainTally, named_sites

MAX_DOMAIN_SERIES = 64
"""Domains named in the gauges at most; the rest are summed into ``OTHER``."""
OTHER = "(other)"
NO_LABEL = ""
"""The domain label of a site's nodes without its link-domain label."""
FAMILIES = (
    ("nodes", "xpupool_domain_nodes", "Nodes in the site's link domain."),
    ("devices", "xpupool_domain_devices", "Cards in the site's link domain."),
    (
        "devices_free",
        "xpupool_domain_devices_free",
        "Cards with nothing allocated on the link domain's schedulable nodes.",
    ),
    (
        "devices_allocated",
        "xpupool_domain_devices_allocated",
        "Cards some job holds a share of in the link domain.",
    ),
)
"""(DomainTally field, gauge, help)."""


def domain_gauges(tally: list[DomainTally]) -> list[GaugeMetricFamily]:
    """The four gauges (labels ``site``, ``domain``) of the sites that name some domain in
    ``tally``; none when no site does. Bounded as the module says."""
    named = named_sites(tally)
    rows = sorted(
        (d for d in tally if d.site in named),
        key=lambda d: (-d.devices, d.site, d.name is None, d.name or ""),
    )
    if not rows:
        return []
    kept, rest = rows[:MAX_DOMAIN_SERIES], rows[MAX_DOMAIN_SERIES:]
    out = []
    for field, name, text in FAMILIES:
        gauge = GaugeMetricFamily(name, text, labels=["site", "domain"])
        for d in kept:
            gauge.add_metric([d.site, NO_LABEL if d.name is None else d.name], getattr(d, field))
        if rest:
            gauge.add_metric([OTHER, OTHER], sum(getattr(d, field) for d in rest))
        out.append(gauge)
    return out
