"""What ``xpupool up`` builds at start is frozen out of the cyclic collector: it lives as long
as the server, and each full collection walked all of it (issue 25)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from xpupool.server.heap_freeze import SurvivorFreeze, freeze_start_heap
from xpupool.server.up import UpConfig, open_plane

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster-mixed.yaml"


@pytest.mark.slow
def test_the_plane_built_at_start_is_out_of_the_collectors_reach(tmp_path: Path) -> None:
    plane = open_plane(UpConfig(data=tmp_path / "data", cluster=EXAMPLE, agent=False))
    records = plane.node_records
    assert gc.is_tracked(records)
    try:
        frozen = freeze_start_heap()
        assert frozen > 0
        tracked = {id(o) for o in gc.get_objects()}  # the frozen generation is not listed
        assert id(records) not in tracked
        made_later: list[object] = []
        assert id(made_later) in {id(o) for o in gc.get_objects()}
    finally:
        gc.unfreeze()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_start_is_frozen_without_a_collection_and_its_garbage_goes_at_the_first_sweep() -> None:
    """A collection before the freeze walks the whole start heap before the server answers; the
    start's cyclic garbage waits for the sweep that collects frozen garbage anyway."""
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage
    full_before = gc.get_stats()[2]["collections"]
    try:
        freeze_start_heap()
        assert gc.get_stats()[2]["collections"] == full_before  # no full collection at start
        assert gone() is not None  # frozen with the rest
        SurvivorFreeze().sweep()
        assert gone() is None
    finally:
        gc.unfreeze()
