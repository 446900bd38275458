"""Long-lived objects out of the cyclic collector's reach, so that a full collection costs what
changed since the last one, not all that the server holds.

CPython's full collection (generation 2) walks every object the collector tracks, holding the
GIL: the API and the scheduling passes stop meanwhile. ``xpupool up`` freezes what it built at
start (``freeze_start_heap``), but the jobs it holds come later, so each full collection took
longer than the last as jobs accumulated (issue 25; the figures are in docs/benchmarks.md and
its history).

:class:`SurvivorFreeze` freezes what survived each full collection, once it ends: the next one
walks only what came since. The price is that frozen objects which later become garbage *in a
cycle* are not collected (garbage without a cycle is freed by its reference count, frozen or
not); a sweep every ``sweep_s`` unfreezes everything and collects it once, and the survivors are
frozen again. That sweep is a full collection of everything, the one long pause left, so it
waits for a quiet moment, a second with no submission and none pending, for one more period at
most."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

from xpupool.server import machinery_switch

QUIET_CHECK_S = 1.0
"""How often a due sweep asks whether the server is quiet."""


def freeze_start_heap() -> int:
    """Put every object alive once the server has started (the pool's node and device records,
    the engine's tables, the imported modules) out of the cyclic collector's reach, and return
    how many. They live as long as the server; left in the oldest generation, each full
    collection walks all of them holding the GIL, and stops the API and the scheduler for longer
    the larger the pool (issue 25; figures in docs/benchmarks.md and its history). Objects made
    later (jobs, requests) are collected as usual.

    No collection comes first: it would walk all of those objects (a quarter of a CPU second
    before the server answers: docs/benchmarks.md, start-up) to find the start's few cyclic
    garbage, which is frozen with the rest and collected by :class:`SurvivorFreeze`'s first
    sweep instead, at a quiet moment. ``XPUPOOL_WITHOUT=heap-freeze`` switches it off for its
    benchmark (``server/machinery_switch.py``)."""
    if machinery_switch.off("heap-freeze"):
        return 0
    gc.freeze()
    return gc.get_freeze_count()


class SurvivorFreeze:
    """Freezes the survivors of each full collection; sweeps every ``sweep_s`` in a thread, when
    ``quiet()`` says so or one period later.

    ``start`` installs it, ``stop`` takes it out (what is frozen stays frozen)."""

    def __init__(self, sweep_s: float = 600.0, quiet: Callable[[], bool] = lambda: True) -> None:
        if not sweep_s > 0:
            raise ValueError(f"sweep_s: {sweep_s} must be above 0")
        self.sweep_s = sweep_s
        self.quiet = quiet  # asked every QUIET_CHECK_S once a sweep is due
        self.freezes = 0  # full collections whose survivors were frozen
        self.sweeps = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def after_collection(self, phase: str, info: dict[str, Any]) -> None:
        """A ``gc.callbacks`` entry: at the end of a full collection its survivors are all that
        the collector tracks (the younger generations were collected with it), and they go out
        of its reach."""
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()
            self.freezes += 1

    def sweep(self) -> int:
        """Collect the cyclic garbage among frozen objects: everything goes back into the
        collector's reach for one full collection, whose survivors are frozen again by
        :meth:`after_collection`. Returns what it collected."""
        gc.unfreeze()
        collected = gc.collect()
        self.sweeps += 1
        return collected

    def start(self) -> None:
        if machinery_switch.off("heap-freeze"):
            return
        gc.callbacks.append(self.after_collection)
        self._thread = threading.Thread(target=self._sweeps, name="xpupool-heap-sweep", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self.after_collection in gc.callbacks:
            gc.callbacks.remove(self.after_collection)
        if self._thread is not None:
            self._thread.join(10)

    def _sweeps(self) -> None:
        while not self._stopped.wait(self.sweep_s):
            waited = 0.0  # for a quiet moment, one more period at most
            while waited < self.sweep_s and not self.quiet():
                if self._stopped.wait(QUIET_CHECK_S):
                    return
                waited += QUIET_CHECK_S
            self.sweep()
