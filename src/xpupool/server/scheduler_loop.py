"""The scheduling loop: run the engine's scheduling cycle over the pending jobs and record what it
decides.

One pass takes the pending jobs that could have become placeable since they last failed (at most
``RETRIES_PER_TENANT`` retries per tenant, so one tenant's queue does not set everyone's pace: the
plane's retry gate, ``engine/cycle/retry_gate.py``, which the timed simulator holds too). The
cycle (``engine/cycle/``) orders them by dominant resource fairness, then priority, then age, and
decides each: placed, waiting (with the reason), or preempting lower-priority jobs. Jobs that do not
fit are skipped, not waited on (Kueue's BestEffortFIFO), so a large job never blocks small ones
behind it; a job exactly like one refused earlier in the pass is refused without a second try while
nothing was released. This loop persists the decisions: allocations and states in the store,
victims stopped through their agents and requeued, the preemptor placed once their devices are free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator

from xpupool.engine.cycle.retry_gate import PERIODIC_PASS_S, RETRIES_PER_TENANT
from xpupool.model.errors import Unavailable
from xpupool.server import rehearsal
from xpupool.server.plane import (
    ControlPlane,
    consolidation_moves,
    elastic_runs,
    faster_moves,
    scheduling_pass,
)

log = logging.getLogger("xpupool.scheduler")
__all__ = [
    "BATCH_JOBS",
    "BATCH_S",
    "RETRIES_PER_TENANT",  # the gate's, named here as the pass's cap it is
    "YIELD_S",
    "pass_steps",
    "run_passes",
    "schedule_pass",
]

BATCH_JOBS = 32
"""Jobs tried in one batch at most: one lock hold and one store transaction
(``plane/scheduling_pass.py``: ``batch``)."""
BATCH_S = 0.005
"""Seconds a batch goes on taking jobs: what a submission may wait behind it, at most about."""
YIELD_S = 0.002
"""Seconds a pass waits at most, between two batches, for the writes waiting for the lock."""


def schedule_pass(plane: ControlPlane) -> int:
    """One pass, run to its end in the calling thread; returns how many jobs were placed.
    Thread-safe. Between two batches it lets in the writes waiting for the lock
    (``_let_writers_in``). Tests and tools call it; the server runs the same pass on its event
    loop (``run_passes``)."""
    steps = pass_steps(plane)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            placed: int = done.value
            return placed
        _let_writers_in(plane)


def pass_steps(plane: ControlPlane) -> Generator[None, None, int]:
    """One pass, a batch per step: it yields between two batches and returns how many jobs
    were placed.

    The jobs are tried in batches (``plane/scheduling_pass.py``, each one operation of the plane):
    the plane's lock is held for one batch, not for the whole pass, so a pass over many pending
    jobs (one tenant's flood of gangs that never fit) does not make every submission, heartbeat
    and cancel wait for all of them (issue 18, bench/tenant_flood.py), and each batch is one store
    transaction, not one per job (issue 25).
    A job placed, cancelled or requeued while the pass ran is skipped. The online workload the
    engine learns from the jobs it is asked to place is learned again, when due, once the pass
    is done, and preferably when no job arrived meanwhile (``scheduling_pass.end``)."""
    start = scheduling_pass.begin(plane)
    if start is None:
        _grow(plane)
        return 0
    placed = 0
    k = 0
    while k < len(start.order):
        done, k = scheduling_pass.batch(
            plane, start.choice.jobs, start.order, k, BATCH_JOBS, BATCH_S
        )
        placed += done
        yield
    scheduling_pass.end(plane, start)  # once per pass, not in the middle of a batch of placements
    _grow(plane)
    plane.notify("pass", time.perf_counter() - start.started)
    # retries left out while some fitted: a backlog to go on with
    if start.choice.again_at_once(placed):
        plane.wake.set()
    return placed


def _grow(plane: ControlPlane) -> None:
    """Elastic jobs grow into what the pending jobs left (``plane/elastic_runs.py``), one
    replica each per pass: another pass follows at once while any grew. Then running jobs move
    to faster cards none of the pending jobs took, where that is on (``plane/faster_moves.py``)."""
    faster_moves.step(plane)
    consolidation_moves.step(plane)  # in quiet periods (plane/consolidation_moves.py)
    if elastic_runs.grow_step(plane):
        plane.wake.set()


async def run_passes(plane: ControlPlane, period_s: float = PERIODIC_PASS_S) -> None:
    """The server's scheduling loop, on the event loop that serves the API: a pass whenever
    woken (a submission, a release, a node change) and every ``period_s``, until cancelled.

    Why not a thread: the API and the passes both run Python, and two busy threads of one
    interpreter take turns at the GIL, and at the server's limit the handovers cost about as much
    CPU as the work (issue 25; docs/benchmarks.md and its history). Between two batches of a
    pass the loop serves what came meanwhile, so a submission waits for one batch (``BATCH_S``)
    at most, as it did for the lock. A cancel lands between two batches, never inside one.

    Numba compiles a loop on its first call and holds its compiler's lock meanwhile: a pass that
    called a loop still compiling (a first start, or a loop's source changed) would wait there,
    seconds of CPU, tens on a loaded machine, and the event loop with it, serving nothing, not even
    ``/healthz`` (issue 42). So until every loop a placement calls is loaded
    (``rehearsal.py``), the passes wait for that on a thread."""
    while True:
        await plane.wake.wait(period_s)
        try:
            running = rehearsal.plane_profiles(plane)  # a queue's may change
            if not rehearsal.ready(running):
                await asyncio.to_thread(rehearsal.warm, running, plane.profiles)
            for _ in pass_steps(plane):
                await _serve_between_batches(plane)
        except Unavailable:
            pass  # the store cannot be written: said once by the plane's health
        except Exception:
            log.exception("scheduling pass failed")


async def _serve_between_batches(plane: ControlPlane) -> None:
    """Let the event loop serve the requests that came during a batch, and let the writers of
    other threads (the agent inside ``up``, the lost-node watch) that wait for the lock in
    first: this loop takes the lock again at once otherwise, and the lock is not fair."""
    await asyncio.sleep(0)
    if plane.writers_waiting:  # they are threads: wait for them off the loop
        await asyncio.to_thread(plane.wait_for_writers, YIELD_S)


def _let_writers_in(plane: ControlPlane) -> None:
    """Wait (``YIELD_S`` at most) until no thread waits to write: the lock is not fair, and a
    pass that took it again at once after each batch would keep submissions waiting for all of
    its batches, not one (issue 25)."""
    plane.wait_for_writers(YIELD_S)
