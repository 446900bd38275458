"""The retry gate alone: which pending jobs one pass tries (engine/cycle/retry_gate.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from xpupool.engine.cycle.retry_gate import NEVER_TRIED, RetryGate


@dataclass
class Job:
    id: int
    tenant: str = "t"
    priority: int = 0
    tried: int = NEVER_TRIED
    not_before: float = 0.0


def ids(jobs: list[Job]) -> list[int]:
    return [j.id for j in jobs]


def test_new_jobs_are_all_tried_whatever_the_cap() -> None:
    gate = RetryGate(retries_per_tenant=2)
    jobs = [Job(i) for i in range(5)]
    choice = gate.choose(jobs, now=0.0)
    assert ids(choice.jobs) == [0, 1, 2, 3, 4]
    assert not choice.left_out


def test_a_failed_job_waits_for_the_capacity_to_change() -> None:
    gate = RetryGate()
    job = Job(1)
    gate.failed(job, gate.generation)
    assert gate.tried_now(job)
    assert gate.choose([job], now=0.0).jobs == []
    gate.capacity_changed()
    assert not gate.tried_now(job)
    assert ids(gate.choose([job], now=0.0).jobs) == [1]


def test_a_change_while_it_was_decided_still_counts() -> None:
    gate = RetryGate()
    job = Job(1)
    before = gate.generation
    gate.capacity_changed()  # e.g. its victims were released at once
    gate.failed(job, before)
    assert ids(gate.choose([job], now=0.0).jobs) == [1]


def test_retries_are_capped_per_tenant_and_new_jobs_come_first() -> None:
    gate = RetryGate(retries_per_tenant=2)
    old = [Job(i, "a") for i in range(4)] + [Job(10, "b")]
    for job in old:
        gate.failed(job, gate.generation)
    gate.capacity_changed()
    new = Job(20, "a")
    choice = gate.choose([*old, new], now=0.0)
    assert ids(choice.jobs) == [20, 0, 1, 10]  # two of a's four retries, b's one
    assert choice.left_out


def test_retries_go_by_priority_then_the_oldest_tried_then_id() -> None:
    gate = RetryGate(retries_per_tenant=3)
    jobs = [Job(1, priority=0), Job(2, priority=5), Job(3, priority=0), Job(4, priority=0)]
    gate.failed(jobs[0], 2)
    gate.failed(jobs[1], 2)
    gate.failed(jobs[2], 1)
    gate.failed(jobs[3], 2)
    for _ in range(3):
        gate.capacity_changed()
    assert ids(gate.choose(jobs, now=0.0).jobs) == [2, 3, 1]


def test_the_ones_left_out_come_next_without_another_change() -> None:
    gate = RetryGate(retries_per_tenant=2)
    jobs = [Job(i) for i in range(3)]
    for job in jobs:
        gate.failed(job, gate.generation)
    gate.capacity_changed()
    first = gate.choose(jobs, now=0.0)
    assert ids(first.jobs) == [0, 1]
    for job in first.jobs:
        gate.failed(job, gate.generation)
    second = gate.choose(jobs, now=0.0)
    assert ids(second.jobs) == [2]
    assert not second.left_out


def test_a_backlog_goes_on_at_once_only_when_the_pass_placed_something() -> None:
    gate = RetryGate(retries_per_tenant=1)
    jobs = [Job(1), Job(2)]
    for job in jobs:
        gate.failed(job, gate.generation)
    gate.capacity_changed()
    choice = gate.choose(jobs, now=0.0)
    assert choice.left_out
    assert choice.again_at_once(placed=1)
    assert not choice.again_at_once(placed=0)
    assert not gate.choose([Job(3)], now=0.0).again_at_once(placed=1)  # nothing left out


def test_a_backoff_is_waited_out() -> None:
    gate = RetryGate()
    job = Job(1, not_before=100.0)
    assert gate.choose([job], now=99.0).jobs == []
    assert ids(gate.choose([job], now=100.0).jobs) == [1]


def test_the_cap_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RetryGate(retries_per_tenant=0)
