"""No placement ever puts a guaranteed share on a card committed beyond its physical capacity.

On random clusters whose cards carry random over-commit factors (plain A100 pools, where shares
pile up, and the general random clusters), random place/release sequences
of requests with random QoS classes (issue 54 part 5): right after a guaranteed share is placed,
every card it took has at most its physical memory and one card's compute granted, counted here
from the live allocations and the Device records, independently of the state's arrays.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.model import Device, DeviceRequest, Node, Request
from xpupool.model.qos import QoS

from strategies import examples, nodes, requests

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def shares(draw: st.DrawFn) -> Request:
    """A plain share of one or two cards, of memory or compute or both, so that cards fill up
    past their physical size often (the general requests' selectors leave most cards empty)."""
    kind = draw(st.sampled_from(["memory", "cores", "both"]))
    permille = draw(st.integers(100, 700))
    devices = DeviceRequest(
        count=draw(st.integers(1, 2)),
        memory_permille=None if kind == "cores" else permille,
        core_permille=None if kind == "memory" else draw(st.integers(100, 700)),
    )
    return Request("s", 0, 0, devices)


@st.composite
def over_committed_nodes(draw: st.DrawFn) -> list[Node]:
    """One to three nodes of one to four A100s, each card with its own factors, often > 1."""
    factors = st.sampled_from([1.0, 1.25, 1.5, 2.0])
    out = []
    for i in range(draw(st.integers(1, 3))):
        devices = tuple(
            Device(f"n{i}-d{j}", "nvidia", "NVIDIA A100-SXM4-80GB", 81920, index=j,
                   memory_overcommit=draw(factors), cores_overcommit=draw(factors))
            for j in range(draw(st.integers(1, 4)))
        )  # fmt: skip
        out.append(Node(f"n{i}", 64_000, 512 * 1024, devices))
    return out


def _granted(state: ClusterState) -> dict[int, tuple[int, int]]:
    """Per card slot: (MiB, thousandths) granted to the live allocations."""
    out: dict[int, tuple[int, int]] = {}
    for alloc in state.live.values():
        for share in alloc.devices:
            mib, core = out.get(share.slot, (0, 0))
            out[share.slot] = (mib + share.memory_mib, core + share.core_permille)
    return out


@SETTINGS
@given(
    over_committed_nodes() | nodes(capacity=True),
    st.lists(
        st.tuples(
            st.one_of(shares(), shares(), requests()),
            st.sampled_from(list(QoS)),
            st.integers(0, 9),
        ),
        min_size=6,
        max_size=30,
    ),
    st.sampled_from(["binpack", "spread", "xpupool"]),
)
def test_a_guaranteed_share_never_lands_on_a_card_committed_beyond_physical(
    cluster: list[Node], steps: list[tuple[Request, QoS, int]], profile: str
) -> None:
    state = ClusterState(cluster, seed=1)
    engine = Engine(state, profile, seed=1)
    for req, qos, roll in steps:
        placement = engine.place(replace(req, qos=qos))
        if qos is QoS.GUARANTEED and req.devices.shares_specified:
            granted = _granted(state)
            for alloc in placement.allocations:
                for share in alloc.devices:
                    node, col = divmod(share.slot, state.width)
                    device = state.nodes[node].devices[col]
                    mib, core = granted[share.slot]
                    assert mib <= device.memory_mib, (device.uuid, mib)
                    assert core <= 1000, (device.uuid, core)
        if roll < 4 and state.live:
            engine.release(sorted(state.live)[roll % len(state.live)])
