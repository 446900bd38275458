"""Timed replay on a one-GPU cluster where every wait can be worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.timed_replay import QueueOrder, timed_replay

NODE = Node("n", 8000, 8192, (Device("g0", "nvidia", "T4", 15360),))


def job(name: str, arrive: int, run: int, qos: str = "BE") -> TraceTask:
    return TraceTask(name, 1000, 0, 1, 1000, (), arrive, arrive + run, arrive, qos)


TASKS = [job("a", 0, 10), job("b", 1, 10, "BE"), job("c", 2, 10, "LS")]
WORKLOAD = TargetWorkload.from_requests(to_request(t) for t in TASKS)


def test_fifo_waits_and_completion_times_by_hand() -> None:
    result = timed_replay([NODE], TASKS, "bestfit", 0, WORKLOAD, QueueOrder.FIFO)
    # a runs 0-10, b 10-20 (waited 9), c 20-30 (waited 18)
    assert result.wait_s.tolist() == [0.0, 9.0, 18.0]
    assert result.jct_s.tolist() == [10.0, 19.0, 28.0]
    summary = result.summary()
    assert summary["never_placed"] == 0
    assert summary["peak_util_pct"] == 100.0


def test_priority_lets_the_latency_sensitive_task_jump_the_queue() -> None:
    result = timed_replay([NODE], TASKS, "bestfit", 0, WORKLOAD, QueueOrder.PRIORITY)
    # at 10 the LS task c goes before the BE task b: c waits 8, b waits 19
    assert result.wait_s.tolist() == [0.0, 19.0, 8.0]


def test_compression_brings_arrivals_closer_but_keeps_durations() -> None:
    tasks = [job("a", 0, 10), job("b", 100, 10)]
    relaxed = timed_replay([NODE], tasks, "bestfit", 0, WORKLOAD)
    assert relaxed.wait_s.tolist() == [0.0, 0.0]
    squeezed = timed_replay([NODE], tasks, "bestfit", 0, WORKLOAD, compress=20.0)
    assert squeezed.wait_s.tolist() == [0.0, 5.0]  # b now arrives at 5, a leaves at 10
    with pytest.raises(ValueError, match="compress"):
        timed_replay([NODE], tasks, "bestfit", 0, WORKLOAD, compress=0)


def test_a_task_that_never_fits_is_counted_not_lost() -> None:
    too_big = TraceTask("big", 1000, 0, 2, 1000, (), 0, 10, 0, "BE")
    result = timed_replay([NODE], [*TASKS, too_big], "bestfit", 0, WORKLOAD)
    assert np.isnan(result.wait_s[3])
    assert result.summary()["never_placed"] == 1
