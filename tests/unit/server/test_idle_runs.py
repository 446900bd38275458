"""Which runs are idle long enough to stop (server/idle_runs.py): only fresh readings under the
threshold on every card held whole count, without a break, for the whole window."""

from __future__ import annotations

from dataclasses import dataclass, field

from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.stopping import IdleStop
from xpupool.server.idle_runs import idle_runs
from xpupool.server.live_metrics import Reading
from xpupool.server.schemas.jobs import JobPhase

RULE = IdleStop(5.0, 600.0)


def alloc(*cards: tuple[str, int]) -> Allocation:
    shares = tuple(DeviceShare(uuid, i, 1024, permille) for i, (uuid, permille) in enumerate(cards))
    return Allocation(1, "j", 0, "n1", 0, 0, 0, shares)


@dataclass
class Run:
    id: int
    allocations: list[Allocation]
    idle_stop: IdleStop | None = RULE
    state: JobPhase = JobPhase.RUNNING
    stop: object | None = None
    idle_since: float | None = None
    readings: dict[str, Reading] = field(default_factory=dict)


def at(run: Run, now: float, **util: float | None) -> list[tuple[int, str]]:
    """The readings of ``util`` (card -> %) taken at ``now``, then the check at ``now``."""
    for uuid, pct in util.items():
        run.readings[uuid] = Reading(now, pct, None, None, None)
    return idle_runs([run], run.readings.get, now)


def test_idle_for_the_whole_window_is_stopped_saying_why() -> None:
    run = Run(7, [alloc(("a", 1000), ("b", 1000))])
    assert at(run, 0.0, a=1.0, b=4.0) == []
    assert at(run, 599.0, a=1.0, b=4.0) == []
    [(job, why)] = at(run, 600.0, a=1.0, b=4.0)
    assert job == 7
    assert why == "idle: its 2 card(s) stayed under 5% utilisation for 10m (idle_stop=5%/10m)"


def test_one_busy_reading_starts_the_window_again() -> None:
    run = Run(7, [alloc(("a", 1000), ("b", 1000))])
    at(run, 0.0, a=1.0, b=1.0)
    at(run, 300.0, a=1.0, b=5.0)  # at the threshold: busy
    assert run.idle_since is None
    at(run, 301.0, a=1.0, b=1.0)
    assert at(run, 900.0, a=1.0, b=1.0) == []
    assert at(run, 901.0, a=1.0, b=1.0) != []


def test_nothing_is_stopped_on_what_was_not_read() -> None:
    stale = Run(1, [alloc(("a", 1000))])
    at(stale, 0.0, a=1.0)
    assert idle_runs([stale], stale.readings.get, 10_000.0) == []  # the reading went stale
    assert stale.idle_since is None
    unread = Run(2, [alloc(("a", 1000))])
    at(unread, 0.0, a=None)
    assert at(unread, 10_000.0, a=None) == [] and unread.idle_since is None
    never = Run(3, [alloc(("a", 1000))])
    assert idle_runs([never], {}.get, 10_000.0) == []


def test_a_shared_card_says_nothing_of_its_job() -> None:
    run = Run(1, [alloc(("a", 1000), ("b", 500))])  # a share of card b: others may use it
    at(run, 0.0, a=0.0, b=0.0)
    assert at(run, 10_000.0, a=0.0, b=0.0) == [] and run.idle_since is None


def test_only_running_jobs_that_ask_and_are_not_stopping() -> None:
    quiet = {"a": Reading(0.0, 0.0, None, None, None)}
    runs = [
        Run(1, [alloc(("a", 1000))], idle_stop=None),
        Run(2, [alloc(("a", 1000))], state=JobPhase.SCHEDULED),
        Run(3, [alloc(("a", 1000))], stop="cancelled"),
    ]
    for now in (0.0, 10_000.0):
        quiet["a"] = Reading(now, 0.0, None, None, None)
        assert idle_runs(runs, quiet.get, now) == []
