"""What survives a full collection goes out of the collector's reach, so that the next full
collection walks what came since, not every job the server holds (issue 25: 20 to 140 ms
pauses growing with the held jobs); a sweep collects the cycles that became garbage among frozen
objects, which nothing else would."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from xpupool.model.request import Request
from xpupool.server import heap_freeze
from xpupool.server.heap_freeze import SurvivorFreeze
from xpupool.server.plane import PendingJob
from xpupool.server.up import UpConfig, no_job_since_asked, open_plane

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster-mixed.yaml"


class Box:
    """A tracked object that can be weakly referenced, to see when it is collected."""

    ref: object = None


@pytest.fixture
def survivors() -> Iterator[SurvivorFreeze]:
    freeze = SurvivorFreeze(sweep_s=3600)
    freeze.start()
    try:
        yield freeze
    finally:
        freeze.stop()
        gc.unfreeze()


def wait_for_sweeps(freeze: SurvivorFreeze, sweeps: int) -> None:
    """Until ``freeze`` swept ``sweeps`` times (30 s at most: the test's assertions say if not)."""
    deadline = time.monotonic() + 30
    while freeze.sweeps < sweeps and time.monotonic() < deadline:
        time.sleep(0.005)


def tracked_ids() -> set[int]:
    return {id(o) for o in gc.get_objects()}  # the frozen objects are not listed


@pytest.mark.slow
def test_what_survives_a_full_collection_is_out_of_the_next_ones_reach(
    survivors: SurvivorFreeze,
) -> None:
    held = [Box() for _ in range(1000)]  # jobs the server holds
    assert id(held[500]) in tracked_ids()
    gc.collect()
    assert survivors.freezes >= 1
    tracked = tracked_ids()
    assert id(held) not in tracked and id(held[500]) not in tracked
    later = Box()  # a job that came after
    assert id(later) in tracked_ids()
    gc.collect()
    assert id(later) not in tracked_ids()


@pytest.mark.slow
def test_a_full_collection_freezes_nothing_once_it_is_stopped() -> None:
    freeze = SurvivorFreeze(sweep_s=3600)
    freeze.start()
    freeze.stop()
    try:
        held = Box()
        gc.collect()
        assert freeze.freezes == 0
        assert id(held) in tracked_ids()
    finally:
        gc.unfreeze()


@pytest.mark.slow
def test_a_cycle_that_became_garbage_while_frozen_is_collected_by_the_sweep(
    survivors: SurvivorFreeze,
) -> None:
    box = Box()
    box.ref = box  # a cycle: its reference count never falls to 0
    gone = weakref.ref(box)
    gc.collect()  # it survives, and is frozen
    del box
    gc.collect()
    assert gone() is not None  # the price of freezing: out of reach until the sweep
    assert survivors.sweep() >= 1
    assert gone() is None
    survivor = Box()
    gc.collect()
    assert id(survivor) not in tracked_ids()  # the sweep's survivors are frozen again


@pytest.mark.slow
def test_garbage_without_a_cycle_is_freed_though_frozen(survivors: SurvivorFreeze) -> None:
    box = Box()
    gone = weakref.ref(box)
    gc.collect()
    del box
    assert gone() is None


@pytest.mark.slow
def test_the_sweep_runs_every_sweep_s() -> None:
    freeze = SurvivorFreeze(sweep_s=0.05)
    freeze.start()
    try:
        wait_for_sweeps(freeze, 2)
        assert freeze.sweeps >= 2
    finally:
        freeze.stop()
        gc.unfreeze()


@pytest.mark.parametrize("sweep_s", [0, -1.0, float("nan")])
def test_a_sweep_period_not_above_zero_is_refused(sweep_s: float) -> None:
    with pytest.raises(ValueError, match="sweep_s"):
        SurvivorFreeze(sweep_s=sweep_s)


@pytest.mark.slow
def test_a_due_sweep_waits_for_a_quiet_moment_one_period_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heap_freeze, "QUIET_CHECK_S", 0.01)
    asked: list[float] = []
    quiet_after = 5  # busy the first five times it is asked

    def quiet() -> bool:
        asked.append(time.monotonic())
        return len(asked) > quiet_after

    freeze = SurvivorFreeze(sweep_s=1.0, quiet=quiet)  # 100 checks a period
    freeze.start()
    try:
        wait_for_sweeps(freeze, 1)
        assert freeze.sweeps == 1
        assert len(asked) == quiet_after + 1  # swept once it was quiet, not before
    finally:
        freeze.stop()
        gc.unfreeze()


@pytest.mark.slow
def test_a_sweep_that_never_finds_a_quiet_moment_runs_one_period_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heap_freeze, "QUIET_CHECK_S", 0.01)
    asked: list[float] = []

    def busy() -> bool:
        asked.append(time.monotonic())
        return False

    freeze = SurvivorFreeze(sweep_s=0.05, quiet=busy)
    freeze.start()
    try:
        wait_for_sweeps(freeze, 1)
        assert freeze.sweeps >= 1
        assert len(asked) >= 5  # one more period of checks, 0.01 s apart, then swept anyway
    finally:
        freeze.stop()
        gc.unfreeze()


def test_the_server_is_quiet_when_no_job_came_since_it_was_last_asked(tmp_path: Path) -> None:
    plane = open_plane(UpConfig(data=tmp_path / "data", cluster=EXAMPLE, agent=False))
    quiet = no_job_since_asked(plane)
    assert quiet()
    plane.next_job_id += 1  # a submission
    assert not quiet()
    assert quiet()  # none since
    plane.queue_job(PendingJob(7, "lab", "lab", 0, Request(), 0.0))  # one waits to be placed
    assert not quiet()
