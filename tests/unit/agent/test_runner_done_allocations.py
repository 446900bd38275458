"""Work handed on an allocation this node already finished is answered, never dropped (issue 43,
item 3). Before, the runner returned None and reported nothing: a server that handed an
allocation id out twice (its ids restarted after a restart or a registration) saw the job sit
``scheduled`` for ever, holding its cards. Now the agent says why it did not start it, and a
server that asks again for a run that is over (it restarted and lost the replica's end) is told
how that run ended."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agent_work import poll_until, settings, started, work

from xpupool.agent import replica_dir as rd
from xpupool.agent.runner import Runner


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _ran_and_acknowledged(runner: Runner, job_id: int, allocation_id: int) -> None:
    started(runner.start(work(_py("pass"), job_id=job_id, allocation_id=allocation_id)), runner)
    poll_until(lambda: runner.replicas[(job_id, 0)].state == "succeeded", runner)
    runner.acknowledge(runner.reports())
    assert runner.replicas == {}


@pytest.mark.slow
def test_an_allocation_id_handed_out_again_is_reported_with_the_reason(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    _ran_and_acknowledged(runner, job_id=7, allocation_id=1)
    assert runner.start(work(_py("pass"), job_id=8, allocation_id=1)) is None  # nothing started
    (report,) = runner.reports()
    assert (report.job_id, report.replica, report.state) == (8, 0, "failed")
    assert report.pid is None and report.exit_code is None
    assert "allocation 1 already ran on n1" in report.reason
    assert "job 7 replica 0" in report.reason
    assert not [d for d in rd.replica_dirs(tmp_path) if d.path.name.startswith("8.")]
    runner.acknowledge([report])
    assert runner.replicas == {}
    # the answer is not a run: the allocation still belongs to job 7's finished run
    runner.start(work(_py("pass"), job_id=7, allocation_id=1))
    assert [(r.job_id, r.state) for r in runner.reports()] == [(7, "succeeded")]


@pytest.mark.slow
def test_a_finished_run_asked_for_again_is_told_as_it_ended(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    _ran_and_acknowledged(runner, job_id=7, allocation_id=3)
    assert runner.start(work(_py("pass"), job_id=7, allocation_id=3)) is None  # not run again
    (report,) = runner.reports()
    assert (report.job_id, report.state, report.exit_code) == (7, "succeeded", 0)
    assert report.attempt is None  # told, not run: whichever attempt the server counts now
    runner.acknowledge([report])
    assert runner.replicas == {}


@pytest.mark.slow
def test_a_later_attempt_on_the_same_allocation_starts_after_the_run_it_replaced(
    tmp_path: Path,
) -> None:
    """The server hands attempt 2 of a running replica on the same allocation (a heartbeat did
    not list the run): the agent stops attempt 1 and starts attempt 2, instead of answering
    attempt 2 with attempt 1's 'stopped', which failed the job (seen in
    tests/integration/test_admin_node_deletion.py once allocations were answered)."""
    runner = Runner("n1", tmp_path, grace_s=0.2, settings=settings(tmp_path))
    first = work(_py("import time; time.sleep(60)"), job_id=7, allocation_id=5)
    started(runner.start(first), runner)
    second = first.model_copy(update={"attempt": first.attempt + 1})
    assert runner.start(second) is None  # attempt 1 is being stopped first
    poll_until(lambda: runner.replicas[(7, 0)].state == "stopped", runner)
    runner.acknowledge(runner.reports())
    rep = started(runner.start(second), runner)
    assert rep is not None and rep.work.attempt == second.attempt
    runner.stop(7, 0)
    poll_until(lambda: runner.replicas[(7, 0)].state == "stopped", runner)
