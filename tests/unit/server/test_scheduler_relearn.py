"""When the scheduling loop re-learns the engine's online workload (issue 25): once a pass is
done, at most once every ``learning_pace.EVERY_S`` of the plane's clock, and not right after a pass
during which a job arrived (that job's pass comes first), unless it was put off for
``learning_pace.WAIT_S`` already. A re-learn builds at once what the next placements would build on
the new workload, so the jobs after it do not pay for it."""

from __future__ import annotations

import pytest
from server_kit import Server, node, submit, tenant

from xpupool.engine import learning_pace
from xpupool.engine.fragmentation.workload_model import WorkloadModel
from xpupool.server import scheduler_loop

WHOLE, SHARE = "A100:1", "A100 mem=1Gi cores=10%"


def model(server: Server) -> WorkloadModel:
    engine = server.plane.engine
    return engine._model(engine.profile)


def learned(server: Server) -> list[int]:
    """The per-card compute of each shape the engine's workload holds, sorted."""
    return sorted(s.devices.core_permille or 1000 for s in model(server).frag.workload.shapes)


@pytest.mark.slow
def test_the_first_relearn_is_at_once_and_the_next_a_second_later(server: Server) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    submit(server, lab, WHOLE)
    assert server.schedule() == 1
    assert learned(server) == [1000] and not server.plane.engine.learning_due
    for _ in range(3):
        submit(server, lab, SHARE)
    assert server.schedule() == 3
    assert server.plane.engine.learning_due and learned(server) == [1000]  # put off
    server.clock.advance(learning_pace.EVERY_S)
    assert server.schedule() == 0  # a pass with nothing to place re-learns what is due
    assert learned(server) == [100, 1000] and not server.plane.engine.learning_due


def test_a_relearn_waits_for_the_pass_of_a_job_that_arrived_during_a_pass(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    arrivals = [SHARE]

    def one_arrives_between_batches(_plane: object) -> None:
        if arrivals:  # where a submission waiting for the lock gets it during a pass
            submit(server, lab, arrivals.pop())

    monkeypatch.setattr(scheduler_loop, "_let_writers_in", one_arrives_between_batches)
    submit(server, lab, WHOLE)
    assert server.schedule() == 1
    assert server.plane.engine.learning_due and learned(server) == []  # put off for the job
    assert server.schedule() == 1  # its pass: nothing arrived meanwhile
    assert learned(server) == [100, 1000]


@pytest.mark.slow
def test_a_relearn_put_off_by_arrivals_is_done_after_the_wait(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")

    def one_arrives_between_batches(_plane: object) -> None:
        submit(server, lab, SHARE)  # a steady stream: a job arrives during every pass

    monkeypatch.setattr(scheduler_loop, "_let_writers_in", one_arrives_between_batches)
    submit(server, lab, WHOLE)
    server.schedule()
    assert learned(server) == [] and server.plane.engine.learning_due
    server.clock.advance(learning_pace.WAIT_S / 2)
    server.schedule()
    assert learned(server) == []
    server.clock.advance(learning_pace.WAIT_S / 2)
    server.schedule()
    assert learned(server) == [100, 1000]
