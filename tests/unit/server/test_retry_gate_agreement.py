"""The server and the timed simulator try the same jobs in each pass (one retry gate,
engine/cycle/retry_gate.py): a scripted backlog on one card, with priorities, seen from both.

Twenty one-card jobs wait while the only card is taken (the server's node is cordoned, the
simulator's card held by a first task); then the card frees. The first pass after that tries
``RETRIES_PER_TENANT`` of them, the highest priority first, places one and leaves the rest out;
the next pass follows at once and tries the ones left out.
"""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, node, queue, submit, tenant

from xpupool.engine.cycle.retry_gate import RETRIES_PER_TENANT
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.server.plane import scheduling_pass
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.queue_config import QOS_PRIORITY
from xpupool.sim.timed_replay import QueueOrder, timed_replay

JOBS = 20
QOS = ("BE", "Burstable", "LS")  # job i has QOS[i % 3]: priorities 0, 1, 2 in turn


def _priority(i: int) -> int:
    return QOS_PRIORITY[QOS[i % len(QOS)]]


def _server_passes(server: Server, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The jobs (by submission order) each server pass tried, from the backlog's first pass."""
    tried: list[int] = []
    try_admit = scheduling_pass._try_admit

    def recording(plane: Any, conn: Any, writes: Any, job: Any) -> bool:
        tried.append(job.id)
        return try_admit(plane, conn, writes, job)

    monkeypatch.setattr(scheduling_pass, "_try_admit", recording)
    node(server, "n1", count=1)
    lab = tenant(server, "lab")
    queue(server, "lab", "lab", [], max_priority=2)
    assert server.client.post("/v1/nodes/n1/cordon", headers=server.admin).status_code == 200
    ids = [submit(server, lab, "A100:1", priority=_priority(i))["id"] for i in range(JOBS)]
    passes = []
    server.schedule()  # nowhere to go: each fails once
    passes.append(list(tried))
    assert server.client.post("/v1/nodes/n1/uncordon", headers=server.admin).status_code == 200
    for _ in range(2):
        tried.clear()
        server.schedule()
        passes.append(list(tried))
    return [[ids.index(j) for j in p] for p in passes]


def _sim_passes() -> list[list[int]]:
    """The tasks (by their order in the backlog) each simulated pass tried, from the backlog's."""
    card = Node("n", 64000, 65536, (Device("g0", "nvidia", "T4", 15360),))
    holder = TraceTask("holder", 1000, 0, 1, 1000, (), 0, 100, 0, "BE")
    backlog = [
        TraceTask(f"t{i}", 1000, 0, 1, 1000, (), 1, 200, None, QOS[i % len(QOS)])
        for i in range(JOBS)
    ]
    tasks = [holder, *backlog]
    passes: list[list[int]] = []
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    timed_replay(
        [card],
        tasks,
        "bestfit",
        0,
        workload,
        order=QueueOrder.PRIORITY,
        on_pass=lambda now, tried: passes.append([i - 1 for i in tried]) if now else None,
    )
    return passes[:3]  # the backlog's arrival, the card's release and the pass that follows


def test_the_server_and_the_simulator_try_the_same_jobs_per_pass(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_server = _server_passes(server, monkeypatch)
    by_sim = _sim_passes()
    assert by_server == by_sim
    first, after_release, left_out = by_sim
    assert sorted(first) == list(range(JOBS))  # new jobs are all tried
    assert len(after_release) == RETRIES_PER_TENANT
    expected = sorted(range(JOBS), key=lambda i: (-_priority(i), i))
    assert after_release == expected[:RETRIES_PER_TENANT]
    assert left_out == expected[RETRIES_PER_TENANT:]
