"""Load for a timed replay: peak demand, the compression that reaches a target, and tiling."""

from __future__ import annotations

import pytest

from xpupool.sim.alibaba import TraceTask
from xpupool.sim.load import compress_for_peak, peak_demand, tile


def task(name: str, arrive: int, run: int, gpus: int = 1) -> TraceTask:
    return TraceTask(name, 1000, 0, gpus, 1000, (), arrive, arrive + run, arrive, "BE")


TASKS = [task("a", 0, 100), task("b", 1000, 100), task("c", 2000, 100, 2)]


def test_peak_demand_counts_what_would_run_at_once() -> None:
    assert peak_demand(TASKS, 4000) == 0.5  # c alone: 2 of 4 cards
    assert peak_demand(TASKS, 4000, compress=1e9) == 1.0  # all at once
    assert peak_demand([task("a", 0, 100), task("b", 100, 100)], 1000) == 1.0  # ends first


def test_compression_reaches_the_target_or_says_the_trace_is_too_small() -> None:
    c = compress_for_peak(TASKS, 4000, 0.75)
    assert abs(peak_demand(TASKS, 4000, c) - 0.75) <= 0.0075
    with pytest.raises(ValueError, match="tile"):
        compress_for_peak(TASKS, 4000, 1.3)


def test_tiles_lay_copies_over_the_same_span() -> None:
    two = tile(TASKS, 2)
    assert [t.name for t in two] == ["a", "b", "c", "a#1", "b#1", "c#1"]
    assert [t.creation_time for t in two[3:]] == [1000, 2000, 999]  # half the span on, wrapped
    assert [t.duration_s for t in two[3:]] == [100, 100, 100]
    assert peak_demand(two, 4000, 1e9) == 2.0
