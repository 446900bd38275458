"""The logs of a Kubernetes site's pods, copied into the plane's replica logs as they are written
(``xpupool logs JOB`` on a job of the site; issue 49 part 2).

Each running (or finished) pod of the plane's gets one follower thread: it streams the pod's
``main`` container log through the API server (``pods/log``, ``follow=true``, the kubelet behind
it) and hands each line to the site's sink with its offset in the run's output, which appends it
through the same service agents upload through (``services/agents.append_log``): the plane's caps,
rotation and disk reserve apply unchanged, and an offset already taken is skipped, so reading the
log again from its start (a stream that broke, a restarted plane) duplicates nothing. A stream
that ends while its pod still runs is opened again after a backoff; one that ends whole once its
pod is finished or gone ends the follower, as does a 404 (the pod is gone) or a sink that refuses
(the job was released). A stream that broke is read again even when its pod has finished meanwhile
(the rest of its log is still the kubelet's), at most :data:`TRIES_AFTER_END` times. A 400 (the
container has not started) is tried again after the backoff.

One thread per followed pod: at most :data:`MAX_FOLLOWED` at once per site; a pod seen while that
many are followed is not (said once in the server's log), and is followed at its next event when
there is room (its log then read from its start).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lightkube import Client
from lightkube.core.exceptions import ApiError

from xpupool.k8s.informers.watch import backoff_s
from xpupool.k8s.site.pods import CONTAINER

log = logging.getLogger(__name__)

__all__ = ["LogTarget", "PodLogs"]

MAX_LINE_BYTES = 64 * 1024  # a longer line is cut there (the upload chunk is bigger still)
MAX_FOLLOWED = 64  # under the client's connection pool (100): each stream holds one
TRIES_AFTER_END = 3  # reads of a finished pod's log whose stream broke, before giving up


@dataclass(frozen=True, slots=True)
class LogTarget:
    """Where a pod's log goes: its job's replica in that run, on the plane's node."""

    job: int
    replica: int
    attempt: int
    node: str


Sink = Callable[[LogTarget, bytes, int], bool]  # False: stop following (the job is gone)


class PodLogs:
    """The followers of one site's pods (see the module's docstring). ``done(key)`` says
    whether the pod ``namespace/name`` is finished or gone (the site's informer knows)."""

    def __init__(
        self,
        site: str,
        client: Callable[[], Client | None],
        sink: Sink,
        done: Callable[[str], bool],
    ) -> None:
        self.site = site
        self._client = client
        self._sink = sink
        self._done = done
        self._lock = threading.Lock()
        self._following: dict[str, threading.Thread] = {}
        self._closed = threading.Event()
        self._full = False  # said that the limit was reached

    def follow(self, key: str, target: LogTarget) -> None:
        """Follow pod ``key`` (``namespace/name``) into ``target``, unless already followed."""
        with self._lock:
            if self._closed.is_set() or key in self._following:
                return
            if len(self._following) >= MAX_FOLLOWED:
                if not self._full:
                    log.warning(
                        "site %s: %d pod logs followed already: pod %s's is not, for now",
                        self.site,
                        MAX_FOLLOWED,
                        key,
                    )
                self._full = True
                return
            self._full = False
            thread = threading.Thread(
                target=self._run, args=(key, target), name=f"log-{key}", daemon=True
            )
            self._following[key] = thread
        thread.start()

    def follows(self, key: str) -> bool:
        """Is pod ``key`` followed now?"""
        with self._lock:
            return key in self._following

    def following(self) -> list[str]:
        with self._lock:
            return sorted(self._following)

    def close(self) -> None:
        """Stop following (the threads end at their next line or retry)."""
        self._closed.set()

    def _run(self, key: str, target: LogTarget) -> None:
        try:
            self._copy(key, target)
        except Exception:  # one pod's log is not worth the site's
            log.exception("site %s: log of pod %s", self.site, key)
        finally:
            with self._lock:
                self._following.pop(key, None)

    def _say(self, key: str, why: str, said: str) -> str:
        """Log why a pod's log cannot be read, once for each new reason (a kubelet the API server
        cannot reach answers the same on every retry); the reason said."""
        if why != said:
            log.warning("site %s: log of pod %s: %s; tried again later", self.site, key, why)
        return why

    def _copy(self, key: str, target: LogTarget) -> None:
        namespace, _, name = key.partition("/")
        failures = after_end = 0
        said = ""
        while not self._closed.is_set():
            client = self._client()
            if client is None:
                return
            offset = 0
            whole = False
            try:
                for line in client.log(name, namespace=namespace, container=CONTAINER, follow=True):
                    if self._closed.is_set():
                        return
                    chunk = line.encode("utf-8", "replace")[:MAX_LINE_BYTES]
                    if not self._sink(target, chunk, offset):
                        return
                    offset += len(chunk)
                    failures = 0
                whole = True
            except ApiError as exc:
                if exc.status.code == 404:
                    return
                if exc.status.code != 400:  # 400: the container has not started yet
                    said = self._say(key, str(exc), said)
            except Exception as exc:  # the API server or the kubelet away: again, later
                said = self._say(key, str(exc), said)
            if self._done(key):
                after_end += 1
                if whole or after_end > TRIES_AFTER_END:
                    return
            failures += 1
            if self._closed.wait(backoff_s(failures)):
                return
