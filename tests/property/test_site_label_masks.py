"""The site and label masks agree with a plain per-node reference, over random nodes and asks,
also after a node joins (the masks are made once per ask and must follow a rebuild)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState
from xpupool.engine.filters.node_selector import NodeSelector
from xpupool.engine.filters.node_site import NodeSite
from xpupool.model import Node, Request

from strategies import examples

SITES = st.sampled_from(["beijing", "shanghai", "hangzhou", "nowhere"])
LABELS = st.dictionaries(st.sampled_from(["pool", "rack", "zone"]), st.sampled_from("abc"))


@st.composite
def fleets(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 12))
    return [
        Node(
            f"n{i}",
            1000,
            1024,
            site=draw(SITES.filter(lambda s: s != "nowhere")),
            labels=draw(LABELS),
        )
        for i in range(count)
    ]


asks = st.builds(
    Request,
    sites=st.lists(SITES, max_size=2).map(tuple),
    exclude_sites=st.lists(SITES, max_size=2).map(tuple),
    node_selector=LABELS.map(lambda d: tuple(sorted(d.items()))),
)


def _reference(node: Node, req: Request) -> bool:
    in_site = not req.sites or node.site in req.sites
    labelled = all(node.labels.get(k) == v for k, v in req.node_selector)
    return in_site and node.site not in req.exclude_sites and labelled


@settings(max_examples=examples(200), deadline=None)
@given(fleets(), st.lists(asks, min_size=1, max_size=4), LABELS)
def test_masks_equal_the_reference(
    fleet: list[Node], requests: list[Request], extra: dict[str, str]
) -> None:
    state = ClusterState(fleet)
    for phase in range(2):
        for req in requests:
            want = [_reference(n, req) for n in state.nodes]
            site = NodeSite().node_mask(req, state)
            label = NodeSelector().node_mask(req, state)
            got = [
                (site is None or bool(site[i])) and (label is None or bool(label[i]))
                for i in range(state.n_nodes)
            ]
            assert got == want, (phase, req)
        if phase == 0:
            state.add_node(Node("joined", 1000, 1024, site="nowhere", labels=extra))
