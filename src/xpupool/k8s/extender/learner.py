"""The extender's learner: re-learns its engine's online workload between verbs.

The default profile learns the workload it places for from the pods (``Engine.place`` tells its
learners when a placement commits). Inline, a re-learn ran inside whichever filter made it due,
with the view's lock held, and set the filters' tail latency (``bench/extender.py --nodes 5000``;
docs/benchmarks.md). The view's engine defers learning (``ClusterView(defer_learning=True)``),
and this thread re-learns when due, paced as the embedded server's scheduling loop paces it
(``engine/learning_pace.py``): at most once a second, and not while pods keep arriving, for half a
second at most. It also builds at once what the next filters would build on a new workload
(``Engine.relearn(warm=True)``). The first re-learn builds every node's measure and lookahead, the
dearest; a later one whose workload moved little keeps what is built.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from xpupool.engine.learning_pace import LearningPace
from xpupool.k8s.informers.cluster_view import ClusterView

log = logging.getLogger("xpupool.k8s.learner")
TICK_S = 0.1
"""Seconds between two looks at whether a re-learn is due."""


class Learner:
    def __init__(
        self,
        view: ClusterView,
        *,
        clock: Callable[[], float] = time.monotonic,
        pace: LearningPace | None = None,
    ) -> None:
        self.view = view
        self.clock = clock
        self.pace = pace or LearningPace()
        self.relearns = 0
        self._seen = view.reservations
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> bool:
        """Re-learn now if that is due and the pace allows (pods arrived since the last tick
        put it off); whether it did."""
        with self.view.engine_locked() as engine:
            arrived = self.view.reservations != self._seen
            self._seen = self.view.reservations
            done = self.pace.tick(engine, self.clock(), arrived)
        self.relearns += done
        return done

    def start(self, tick_s: float = TICK_S) -> Learner:
        def run() -> None:
            while not self._stop.wait(tick_s):
                try:
                    self.tick()
                except Exception:  # a failed re-learn must not end learning for good
                    log.exception("re-learning the workload failed")

        self._thread = threading.Thread(target=run, name="xpupool-learner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
