"""The plane's own pods on a Kubernetes site as the site's pod watch last told it, by key
(``namespace/name``) and by job.

The watch's thread writes it; the site's worker and its pool of creating threads read it. The
worker reads a job's pods from it where it would otherwise ask the API server or scan every pod
the watch holds: a restarted plane's reconciliation reads the watch's first list (a list of its
own was a second read of every pod: 10,000 after a restart at 10,000 pods), and a batch of runs
finds the earlier runs' pods of its jobs by job (a scan of every pod held, per batch, grew with
the site's pods, not with the batch).
"""

from __future__ import annotations

import threading

from xpupool.k8s.site.pods import PodState

__all__ = ["NotListedError", "SeenPods"]


class NotListedError(Exception):
    """The site's pod watch has not listed its pods yet: what reads that list (a restart's
    reconciliation, the sweep of finished jobs' pods) is done again after the worker's backoff
    (a passing failure, never a refusal)."""


class SeenPods:
    """Pod states by key and by job, kept in step under one lock (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, PodState] = {}
        self._by_job: dict[int, dict[str, PodState]] = {}

    def put(self, key: str, state: PodState) -> None:
        """The pod ``key`` is now ``state`` (its job label may have changed: moved)."""
        with self._lock:
            old = self._by_key.get(key)
            if old is not None and old.job != state.job:
                self._drop(key, old.job)
            self._by_key[key] = state
            self._by_job.setdefault(state.job, {})[key] = state

    def pop(self, key: str) -> PodState | None:
        """The pod ``key`` is gone: its last state, or None if it was not held."""
        with self._lock:
            old = self._by_key.pop(key, None)
            if old is not None:
                self._drop(key, old.job)
            return old

    def get(self, key: str) -> PodState | None:
        with self._lock:
            return self._by_key.get(key)

    def of_job(self, job: int) -> list[tuple[str, PodState]]:
        """``(key, state)`` of each pod of ``job`` held now (a copy)."""
        with self._lock:
            return list(self._by_job.get(job, {}).items())

    def namespaces_by_job(self) -> dict[int, set[str]]:
        """The namespaces of each job's pods held now (a copy): what the sweep of finished
        jobs reads instead of listing every pod of the site again."""
        with self._lock:
            return {
                job: {key.partition("/")[0] for key in pods} for job, pods in self._by_job.items()
            }

    def items(self) -> list[tuple[str, PodState]]:
        """``(key, state)`` of every pod held now (a copy)."""
        with self._lock:
            return list(self._by_key.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)

    def _drop(self, key: str, job: int) -> None:
        pods = self._by_job.get(job)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._by_job[job]
