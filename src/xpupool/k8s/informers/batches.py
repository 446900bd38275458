"""An informer's watch events handed to a consumer that pays a write per call, in batches made of
what is already queued: the watch's thread queues each event, and a thread of its own takes the
first event there, then every event queued behind it (up to :data:`MAX_BATCH`), without waiting
for more, and hands them over in one call.

Under a burst (a Kubernetes site at 100 jobs a second, each pod Pending, then bound, then Running)
a write per event is a store commit per event under the plane's lock, and the watch's thread
waits on each; taken as they queue up while the previous call writes, they are one write per
batch, and a lone event is handed over at once: no latency is added to wait for company.
A list's events (``Informer``'s ``listed``) go through the same queue, so they are handed over in
order with the watch's, and the list's caller waits until they are: an informer is synced once
its consumer holds the list."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["MAX_BATCH", "EventBatches"]

MAX_BATCH = 500  # a write's reports at most: the plane's chunk of site reports (site.py)
_QUEUED = 4 * MAX_BATCH  # the watch's thread waits beyond that: a consumer behind holds it back


@dataclass(slots=True)
class _Listed(Generic[T]):
    events: Sequence[T]
    done: threading.Event = field(default_factory=threading.Event)


class EventBatches(Generic[T]):
    """``deliver`` called with batches of events (``T``: the informer's ``Event``), in their
    order, on a thread of its own (:meth:`start`, :meth:`stop`). :meth:`event` and
    :meth:`listed` are the informer's consumer and list consumer. A ``deliver`` that raises is
    logged and the batches go on."""

    def __init__(
        self, deliver: Callable[[Sequence[T]], None], *, name: str, most: int = MAX_BATCH
    ) -> None:
        self.deliver = deliver
        self.name = name
        self.most = most
        self._queue: queue.Queue[T | _Listed[T] | None] = queue.Queue(_QUEUED)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.batches = 0  # calls of ``deliver``, for logs and tests

    def start(self) -> EventBatches[T]:
        self._thread = threading.Thread(target=self._run, name=f"batches-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop handing over (what is still queued is dropped: the informer is stopping too)."""
        self._stopped.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def event(self, event: T) -> None:
        """Queue one watch event (blocks while :data:`_QUEUED` wait: back-pressure)."""
        while not self._stopped.is_set():
            try:
                self._queue.put(event, timeout=0.5)
                return
            except queue.Full:
                continue

    def listed(self, events: Sequence[T]) -> None:
        """Queue a list's events as one batch and wait until it is handed over (or stopped)."""
        item = _Listed(events)
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                break
            except queue.Full:
                continue
        while not self._stopped.is_set() and not item.done.wait(0.5):
            pass

    def _run(self) -> None:
        carried: T | _Listed[T] | None = None
        while not self._stopped.is_set():
            item = carried if carried is not None else self._queue.get()
            carried = None
            if item is None:
                return
            if isinstance(item, _Listed):
                self._hand(item.events)
                item.done.set()
                continue
            batch = [item]
            while len(batch) < self.most:  # what is there now, never waiting for more
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None or isinstance(more, _Listed):
                    carried = more  # a list, or the stop: after this batch
                    break
                batch.append(more)
            self._hand(batch)
            if carried is None and self._stopped.is_set():
                return

    def _hand(self, events: Sequence[T]) -> None:
        if not events:
            return
        self.batches += 1
        try:
            self.deliver(events)
        except Exception:
            log.exception("%s: consumer failed on a batch of %d events", self.name, len(events))
