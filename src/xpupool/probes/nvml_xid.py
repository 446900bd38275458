"""NVIDIA XID events, read from NVML's event set in a thread of their own.

An XID is an event, not a state: NVML hands each one out once, from ``nvmlEventSetWait``, which
blocks. :class:`XidWatch` registers every card for ``nvmlEventTypeXidCriticalError`` (the only
XID event type NVML has, whatever the XID's severity), and :meth:`XidWatch.poll` drains what is
waiting; :meth:`XidWatch.run` is the loop a thread runs on real hardware. The probe takes the
events seen since its last reading with :meth:`XidWatch.take`, so a card with a critical XID reads
unhealthy in the next pass (the server keeps it so until it has read healthy for its settle
period). Tests hand in a fake NVML whose wait returns events and then times out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("xpupool.agent")

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError (nvml.h)
ERROR_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: nothing arrived within the wait


class XidWatch:
    """XIDs per card UUID, gathered from NVML's event set; thread-safe."""

    def __init__(self, nvml: Any, handles: Mapping[str, object]) -> None:
        self.nvml = nvml
        self._lock = threading.Lock()
        self._seen: dict[str, list[int]] = {}
        self.event_set = nvml.nvmlEventSetCreate()
        self.watched: list[str] = []
        kind = getattr(nvml, "nvmlEventTypeXidCriticalError", XID_CRITICAL_ERROR)
        for uuid, handle in handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, kind, self.event_set)
            except Exception as exc:  # an older card or a MIG instance: no XID events there
                log.info("%s: XID events not available: %s", uuid, exc)
                continue
            self.watched.append(uuid)

    def poll(self, timeout_ms: int = 0) -> int:
        """Take every event waiting (the first wait up to ``timeout_ms``); returns how many."""
        taken = 0
        wait = timeout_ms
        while True:
            try:
                event = self.nvml.nvmlEventSetWait(self.event_set, wait)
            except Exception as exc:
                if getattr(exc, "value", None) == getattr(
                    self.nvml, "NVML_ERROR_TIMEOUT", ERROR_TIMEOUT
                ):
                    return taken
                raise
            wait = 0
            uuid = _text(self.nvml.nvmlDeviceGetUUID(event.device))  # handles are C pointers
            with self._lock:
                self._seen.setdefault(uuid, []).append(int(event.eventData))
            taken += 1

    def take(self, uuid: str) -> list[int]:
        """The XIDs card ``uuid`` raised since the last take, oldest first."""
        with self._lock:
            return self._seen.pop(uuid, [])

    def run(self, stop: threading.Event, timeout_ms: int = 1000) -> None:
        """Poll until ``stop`` is set: the body of the watch thread. A failing wait (the driver
        unloaded) is logged and ends the thread: the other health checks carry on."""
        while not stop.is_set():
            try:
                self.poll(timeout_ms)
            except Exception as exc:
                log.warning("XID events: the wait failed, no longer watched: %s", exc)
                return


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
