"""The gang bound (``engine/gang_bound.py``) is an upper bound: over random clusters, held
allocations and requests, placing replicas one by one never lands more than it allows, so a gang
it refuses could not have been placed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.engine.gang_bound import gang_room
from xpupool.model import Node, Request

from strategies import examples, nodes, requests

SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(nodes(), st.lists(requests(), max_size=4), requests(), st.integers(2, 40))
def test_no_placement_exceeds_the_bound(
    cluster: list[Node], held: list[Request], req: Request, replicas: int
) -> None:
    engine = Engine(ClusterState(cluster), "binpack")
    for h in held:  # some capacity already taken, unevenly
        engine.place(replace(h, gang=False))
    asked = replace(req, replicas=replicas, gang=False)
    room = gang_room(engine.pipeline, asked)
    placed = engine.place(asked)
    assert len(placed.allocations) <= room.at_most
    for alloc in placed.allocations:
        engine.release(alloc)
    gang = engine.place(replace(asked, gang=True))
    assert gang.ok == (len(placed.allocations) == replicas)  # the bound refuses only what fails
