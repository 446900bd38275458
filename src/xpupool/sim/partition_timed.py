"""The timed replay on a pool of MIG-capable cards: tasks arrive, run, leave, and cards are re-cut.

The FGD protocol (``partition_replay.py``) places each task once and never frees anything; here
the tasks run for their recorded durations (``timed_replay.py``), so a card's instances fall idle
when their tasks leave and a re-cut may destroy them. :class:`TimedPartitions` is what the timed
replay is given for such a pool (its ``partitions`` argument): the engine over the cut cards,
built and rebuilt through one :class:`~xpupool.engine.host.EngineHost` as every front does when a
node's devices change; each task's one request (:func:`timed_request`); and, for a cut policy with
a rule, the scheduling cycle's re-cut offer (``engine/cycle/recutting.py``): every card in
partition mode, the instances running tasks hold busy (kept exactly), no minimum idle time and no
re-cut in flight, since a re-cut here is carried out at once (:meth:`TimedPartitions.carry_out`:
the layouts change, the engine is rebuilt with every running allocation applied again, and the
task is placed in the same pass). A re-cut is one card's layout changing; destroyed counts the
free instances it removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from xpupool.engine import Engine, Profile
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.host import EngineHost
from xpupool.engine.recut_proposal import PartitionCard, Recut, RecutRule
from xpupool.model import Allocation, Request
from xpupool.sim.alibaba import GPU_MILLI, TraceTask
from xpupool.sim.partition_replay import CutPolicy, MigPool, PartitionCards, task_requests

__all__ = ["OnRun", "TimedPartitions", "timed_request"]

OnRun = Callable[[int, int, Sequence[Allocation] | None], None]
"""``timed_replay``'s ``on_run``: a run's start (its allocations) or end (None)."""


def timed_request(task: TraceTask, pool: MigPool) -> Request:
    """The one request ``task`` asks in the timed replay (it has no second try there): a
    fractional task its smallest profile (``partition_replay.profile_for``) when some card is
    in partition mode, else a software share; a whole-card task whole cards when some card is
    not in partition mode, else as many whole-card instances."""
    asks = task_requests(task, pool.scheme if pool.partitioned else None)
    if len(asks) == 1 or task.gpu_milli < GPU_MILLI:
        return asks[0]
    whole = any(d.uuid not in pool.partitioned for n in pool.nodes for d in n.devices)
    return asks[0] if whole else asks[1]


class TimedPartitions:
    """One timed replay's partitioned pool under ``cutting`` (see the module docstring); also the
    cycle's ``RecutOffer`` when ``cutting`` has a rule (:attr:`offer`)."""

    def __init__(
        self,
        pool: MigPool,
        cutting: CutPolicy,
        policy: Profile | str,
        seed: int,
        workload: TargetWorkload,
    ) -> None:
        self.pool = pool
        self.cutting = cutting
        self.recuts = 0  # card layouts changed
        self.destroyed = 0  # free instances those re-cuts removed
        self._cards = PartitionCards(pool, dict.fromkeys(pool.partitioned, cutting.static or ()))
        self._host = EngineHost(policy, seed=seed, workload=workload)
        self._held: dict[int, Sequence[Allocation]] = {}

    def engine(self) -> Engine:
        """A fresh engine over the cards as they are cut now, served (the replay's first)."""
        engine = self._host.fresh(self._cards.records())
        self._host.install(engine)
        return engine

    @property
    def offer(self) -> TimedPartitions | None:
        """The cycle's re-cut offer: this, when the cut policy has a rule; else None."""
        return self if self.cutting.rule is not None else None

    @property
    def rule(self) -> RecutRule:
        assert self.cutting.rule is not None
        return self.cutting.rule

    def in_flight(self, job: int) -> tuple[Recut, ...]:
        """None: a re-cut is carried out as soon as it is proposed."""
        return ()

    def cards(self, job: int) -> Sequence[PartitionCard]:
        """Every card in partition mode, with the instances running tasks hold busy."""
        return self._cards.cards()

    def request(self, task: TraceTask) -> Request:
        return timed_request(task, self.pool)

    def chain(self, on_run: OnRun | None) -> OnRun:
        """An ``on_run`` that keeps the cards' busy instances as runs start and end, then tells
        ``on_run``."""

        def told(now: int, task: int, allocations: Sequence[Allocation] | None) -> None:
            if allocations is None:
                self._cards.release(self._held.pop(task, ()))
            else:
                self._held[task] = tuple(allocations)
                self._cards.hold(allocations)
            if on_run is not None:
                on_run(now, task, allocations)

        return told

    def carry_out(
        self, changes: Sequence[Recut], running: Mapping[int, Sequence[Allocation]]
    ) -> tuple[Engine, dict[int, list[Allocation]]]:
        """Cut the cards as ``changes`` say and serve a rebuilt engine with ``running``'s
        allocations (per task) applied again; the engine and those allocations re-addressed.
        Raises AssertionError when one no longer fits (a re-cut keeps every busy instance)."""
        self.recuts += len(changes)
        self.destroyed += sum(change.destroyed for change in changes)
        done = self._host.rebuild(self._cards.recut(changes), list(running.items()))
        assert not done.refused, "a re-cut kept every busy instance"
        engine = self._host.engine
        assert engine is not None
        for task, allocations in done.kept.items():
            self._held[task] = tuple(allocations)
        return engine, done.kept
