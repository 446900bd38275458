"""An informer's watch events in batches of those already queued (``informers/batches.py``): a lone
event is handed over at once; events queued while the consumer is busy go together, at most
``most`` a batch, in their order; a list's events stay a batch of their own, in order with the
watch's, and the list's caller waits until they are handed over."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from xpupool.k8s.informers.batches import EventBatches


def test_queued_events_go_together_in_order_and_a_list_keeps_its_place() -> None:
    got: list[list[str]] = []
    busy = threading.Event()
    release = threading.Event()

    def deliver(batch: Sequence[str]) -> None:
        got.append(list(batch))
        busy.set()
        assert release.wait(30)

    batches = EventBatches(deliver, name="t", most=3).start()
    try:
        batches.event("a")  # alone: handed over at once, without waiting for company
        assert busy.wait(30)
        for e in ("b", "c", "d", "e"):
            batches.event(e)  # queued while the consumer is busy
        lister = threading.Thread(target=batches.listed, args=(["L1", "L2"],))
        lister.start()
        time.sleep(0.2)
        assert lister.is_alive()  # the list's caller waits for its list to be handed over
        batches.event("f")
        release.set()
        lister.join(30)
        assert not lister.is_alive()
        deadline = time.monotonic() + 30
        while sum(map(len, got)) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        batches.stop()
    assert got == [["a"], ["b", "c", "d"], ["e"], ["L1", "L2"], ["f"]]
    assert batches.batches == 5


def test_a_consumer_that_raises_loses_its_batch_only() -> None:
    got: list[list[str]] = []

    def deliver(batch: Sequence[str]) -> None:
        if batch[0] == "bad":
            raise ValueError("a hostile object")
        got.append(list(batch))

    batches = EventBatches(deliver, name="t").start()
    try:
        batches.listed(["bad"])  # handed over (and failed) before it returns
        batches.listed(["good"])
    finally:
        batches.stop()
    assert got == [["good"]]
