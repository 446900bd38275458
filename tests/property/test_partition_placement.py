"""Partition placement keeps to the geometry, whatever mix of cards and requests arrives.

Random nodes hold plain cards and cards cut into random valid layouts (``valid_layouts``);
random partition, isolated, whole and share requests arrive and some leave. Checked against the
Device records, not the state's arrays: a partition request holds an instance of its profile (an
isolated one, the smallest profile of its card's model that holds its memory), any other request
holds no instance, and no instance is ever held twice.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card
from xpupool.catalog.partition_geometry import valid_layouts
from xpupool.engine import ClusterState, Engine
from xpupool.model import Device, Node
from xpupool.model.spec import parse_spec

from strategies import examples

pytestmark = pytest.mark.slow  # builds an engine per example: seconds
SETTINGS = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CARDS = {"NVIDIA A100-SXM4-80GB": 81920, "NVIDIA A30": 24576}
SPECS = (
    "A100 mig=3g.40gb",
    "A100 mig=1g.10gb",
    "A100 mig=2g.20gb",
    "A100 mig=7g.80gb",
    "A30 mig=1g.6gb",
    "A30 mig=2g.12gb",
    "any mem=9Gi isolated",
    "any mem=30Gi isolated",
    "any",
    "any mem=4Gi",
    "any cores=30%",
)


@st.composite
def clusters(draw: st.DrawFn) -> list[Node]:
    partitions, accelerators = load_partitions(), load_accelerators()
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        devices: list[Device] = []
        for c in range(draw(st.integers(1, 3))):
            model = draw(st.sampled_from(sorted(CARDS)))
            card = Device(f"n{n}-gpu{c}", "nvidia", model, CARDS[model], index=c)
            scheme = partitions.scheme_for(model, "nvidia", accelerators)
            assert scheme is not None
            if draw(st.booleans()):
                layout = draw(st.sampled_from(valid_layouts(scheme)[1:]))
                devices.extend(cut_card(card, layout, partitions, accelerators))
            else:
                devices.append(card)
        nodes.append(Node(f"n{n}", 64_000, 512 * 1024, tuple(devices)))
    return nodes


@SETTINGS
@given(clusters(), st.lists(st.tuples(st.sampled_from(SPECS), st.booleans()), max_size=25))
def test_partitions_hold_only_their_profile_and_never_twice(
    nodes: list[Node], arrivals: list[tuple[str, bool]]
) -> None:
    partitions, accelerators = load_partitions(), load_accelerators()
    engine = Engine(ClusterState(nodes))
    by_uuid = {d.uuid: d for node in nodes for d in node.devices}
    held: dict[int, tuple[str, list[str]]] = {}
    for spec, leaves in arrivals:
        req = parse_spec(spec)
        for alloc in engine.place(req).allocations:
            uuids = [d.uuid for d in alloc.devices]
            held[alloc.id] = (spec, uuids)
            for uuid in uuids:
                device = by_uuid[uuid]
                d = req.devices
                if d.partition is not None:
                    assert device.partition == d.partition
                elif d.isolated_mib is not None:
                    scheme = partitions.scheme_for(device.model, "nvidia", accelerators)
                    assert scheme is not None
                    smallest = scheme.smallest_holding(d.isolated_mib)
                    assert smallest is not None and device.partition == smallest.name
                else:
                    assert device.partition is None, (spec, uuid)
            if leaves:
                engine.release(alloc.id)
                del held[alloc.id]
        partition_uuids = [
            u for _, uuids in held.values() for u in uuids if by_uuid[u].partition is not None
        ]
        assert len(partition_uuids) == len(set(partition_uuids))
