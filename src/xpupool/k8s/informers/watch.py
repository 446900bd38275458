"""An informer: one kind of object (Nodes, Pods) kept in step with kube-apiserver through lightkube,
delivered to one consumer as added / modified / deleted events, each change exactly once.

It lists, then watches from the list's resourceVersion, as client-go's reflector does
(k8s.io/client-go tools/cache/reflector.go at 32ce75a7: ListAndWatch). When the apiserver answers
``410 Gone`` (reason ``Expired``: the version is older than etcd's compaction or the watch cache's
window) it lists again and delivers the *difference* between the list and what the consumer was
told, so objects created, changed or deleted while the watch was away each give one event (client-go
gets deletes-while-away from its DeltaFIFO's ``Replace``; lightkube's own watch retry restarts from
"now" on 410 and would lose them, so the informer handles 410 itself). A connection error resumes the
watch from the last version seen, after a capped exponential backoff with jitter. Every ``resync_s``
the informer lists again and delivers only what differs: a drift check that costs one list, where
client-go's resync re-delivers its cache unchanged.

Memory: per object the informer keeps its key, uid, resourceVersion and ``transform(obj)``, the value
the consumer needs (a decoded Node, a pod's device charge), never the object itself. A transform that
raises makes the object count as absent (logged), so one hostile object cannot stop the stream.
Events reach the consumer on the informer's own thread, in the order the apiserver sent them, so in
order per object; a consumer that raises is logged and the stream goes on. A consumer that pays a
write per event may take a list's events at once (``listed``): the first list after a restart holds
every object at once (a Kubernetes site's 10,000 pods), where a watch brings them one at a time;
with ``coalesce`` the watch's events go there too, those queued behind one another taken together
(``batches.py``), so a burst of changes costs a write per batch, not per event.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from lightkube import Client
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import Generic as RawObject
from lightkube.types import OnErrorAction, OnErrorResult

from xpupool.k8s.informers.batches import EventBatches
from xpupool.k8s.informers.kubeconfig import InterruptibleTransport, make_client
from xpupool.k8s.informers.lists import LIST_CHUNK, ExpiredError, is_expired, list_whole

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_KEY_CHARS = 64 + 1 + 253  # a namespace (DNS label), '/', a name (DNS subdomain)
MAX_VERSION_CHARS = 64


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Event(Generic[T]):
    """One change of one object. ``key`` is ``namespace/name`` (``name`` for cluster objects);
    ``value`` is the transformed object, for DELETED the last value the consumer was given."""

    type: EventType
    key: str
    uid: str
    value: T


@dataclass(slots=True)
class _Known(Generic[T]):
    uid: str
    version: str
    value: T


class BadObjectError(ValueError):
    """An object whose metadata cannot identify it; carries the field path and the reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(key, uid, resourceVersion) of an apiserver object, checked: strings of bounded length.
    Raises :class:`BadObjectError` naming the field."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise BadObjectError("metadata", "must be an object")
    out: dict[str, str] = {}
    for field, limit, required in (
        ("name", 253, True),
        ("namespace", 63, False),
        ("uid", 128, True),
        ("resourceVersion", MAX_VERSION_CHARS, True),
    ):
        value = meta.get(field)
        if value is None and not required:
            continue
        if not isinstance(value, str) or not value or len(value) > limit:
            raise BadObjectError(
                f"metadata.{field}", f"must be a non-empty string of <= {limit} chars"
            )
        out[field] = value
    key = f"{out['namespace']}/{out['name']}" if "namespace" in out else out["name"]
    return key, out["uid"], out["resourceVersion"]


def backoff_s(failures: int, base_s: float = 0.2, cap_s: float = 30.0) -> float:
    """Delay before retry number ``failures`` (1, 2, ...): doubling from ``base_s``, at most
    ``cap_s``, with up to 50 % jitter so replicas cut off together do not return together."""
    delay: float = min(cap_s, base_s * 2.0 ** min(failures - 1, 30))
    return delay * (0.5 + random.random() / 2)


class Informer(Generic[T]):
    """List-then-watch of ``resource`` (a lightkube resource class; ``kubeconfig.RawNode`` and
    ``RawPod`` give plain dicts) across all namespaces, feeding ``consumer`` with
    ``Event[transform(obj)]``. ``fields``/``labels`` are lightkube selectors applied by the
    apiserver (an object leaving the selection is DELETED). Start with :meth:`start`; stop with
    :meth:`stop`. Thread-safe: :meth:`wait_synced` from any thread. ``listed``, when given,
    takes the events of each list (the first, a resync's, one after a 410) all at once, in the
    list's order, instead of ``consumer`` one by one; the watch's events still go to
    ``consumer``, unless ``coalesce``: then they go to ``listed`` too, in batches of those
    already queued, on a thread of their own (``batches.py``)."""

    def __init__(
        self,
        config: SingleConfig,
        resource: type[RawObject],
        transform: Callable[[dict[str, Any]], T],
        consumer: Callable[[Event[T]], None],
        *,
        fields: Mapping[str, Any] | None = None,
        labels: Mapping[str, Any] | None = None,
        resync_s: float = 300.0,
        watch_timeout_s: int = 300,
        list_chunk: int = LIST_CHUNK,
        backoff_cap_s: float = 30.0,
        name: str | None = None,
        listed: Callable[[Sequence[Event[T]]], None] | None = None,
        coalesce: bool = False,
    ) -> None:
        if coalesce and listed is None:
            raise ValueError("coalesce needs listed: the consumer of batches")
        self.resource = resource
        self.transform = transform
        self.consumer = consumer
        self.listed = listed
        self.fields = dict(fields) if fields else None
        self.labels = dict(labels) if labels else None
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.list_chunk = list_chunk
        self.backoff_cap_s = backoff_cap_s
        self.name = name or resource.__name__
        self._batches: EventBatches[Event[T]] | None = (
            EventBatches(listed, name=self.name) if coalesce and listed is not None else None
        )
        self._transport = InterruptibleTransport(config)
        self._client: Client = make_client(config, transport=self._transport)
        self._known: dict[str, _Known[T]] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._resync_due = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticker: threading.Thread | None = None
        self.version: str | None = None  # the newest resourceVersion delivered
        # monotonic time of the first failure since the last list or watch that ended well
        self._failing_since: float | None = None
        self._progress = 0  # lists and events that got through, to reset the backoff
        # Counters, for logs and tests: lists made, 410s met, watches opened, errors retried.
        self.lists = 0
        self.expired = 0
        self.watches = 0
        self.errors = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Informer[T]:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name} already started")
        if self._batches is not None:
            self._batches.start()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        if self.resync_s > 0:
            self._ticker = threading.Thread(
                target=self._tick, name=f"resync-{self.name}", daemon=True
            )
            self._ticker.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop watching (an open watch is cut at once) and wait for the thread to end. The cut
        is repeated until the thread has ended: a watch the thread was opening when the stop
        came (after a resync's list, say) would otherwise block until the apiserver's own
        timeout, minutes away."""
        self._stop.set()
        if self._batches is not None:  # first: the thread may wait on them to take its events
            self._batches.stop(timeout_s)
        deadline = time.monotonic() + timeout_s
        for thread in (self._thread, self._ticker):
            while thread is not None and thread.is_alive() and time.monotonic() < deadline:
                self._transport.interrupt()
                thread.join(0.05)
        self._client.close()

    def wait_synced(self, timeout_s: float | None = None) -> bool:
        """Block until the first list has been delivered (or ``timeout_s`` passed): True if so."""
        return self._synced.wait(timeout_s)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def silent_since(self) -> float | None:
        """Since when (``time.monotonic``) the API server has not answered this informer: its
        first failed request since the last answer. None while it answers: a list, a watch
        opened (quiet or not), even a refusal are answers; a connection refused, reset or timed
        out is none. A Kubernetes site's reachability (``KubernetesSite.answering``)."""
        failing = self._failing_since
        if failing is None or self._transport.answered_at >= failing:
            return None
        return failing

    def keys(self) -> list[str]:
        """Keys of the objects the consumer holds now (a copy)."""
        return list(self._known)

    def uids(self) -> set[str]:
        """Uids of the objects the consumer holds now (a copy)."""
        return {known.uid for known in list(self._known.values())}

    def resync(self) -> None:
        """List again now and deliver what differs (also what ``resync_s`` does)."""
        self._resync_due.set()
        self._transport.interrupt()

    def reconfigure(self, config: SingleConfig) -> None:
        """Connect with ``config`` from now on (rotated credentials): the open watch is cut and
        the informer lists again through the new client, delivering only what differs from what
        the consumer holds, so nothing changed while it switched is missed or told twice. A
        request of the old client in flight fails and is tried again with the new one."""
        transport = InterruptibleTransport(config)
        old_transport, old_client = self._transport, self._client
        self._transport, self._client = transport, make_client(config, transport=transport)
        self._resync_due.set()  # the loop lists again, through the new client
        old_transport.interrupt()
        # closed on a thread of its own: closing waits for a request in flight on it, and a
        # request the old client would still send (lightkube's watch, going on) then fails
        threading.Thread(target=old_client.close, name=f"close-{self.name}", daemon=True).start()

    # ------------------------------------------------------------------ the loop
    def _tick(self) -> None:
        while not self._stop.wait(self.resync_s):
            self.resync()

    def _run(self) -> None:
        failures = 0  # in a row: counted again from 1 once a list or an event got through
        need_list = True
        progress = self._progress
        while not self._stop.is_set():
            if self._progress != progress:
                failures, progress = 0, self._progress
            phase = "list"
            try:
                if need_list or self._resync_due.is_set():
                    self._resync_due.clear()
                    self._relist()
                    need_list = False
                phase = "watch"
                self._watch()
                failures = 0
                self._failing_since = None
            except ExpiredError as exc:
                self.expired += 1
                log.info("%s: %s expired (%s); listing again", self.name, phase, exc)
                if need_list:  # the list itself expired (a stale continue token): back off
                    failures += 1
                    self._stop.wait(backoff_s(failures, cap_s=self.backoff_cap_s))
                need_list = True
            except Exception as exc:  # connection refused or cut, 5xx, 429, a bad list body
                if self._stop.is_set():
                    break
                failures += 1
                self.errors += 1
                if isinstance(exc, ApiError):  # refused: still an answer
                    self._failing_since = None
                elif self.silent_since is None:  # no answer since: silent from now
                    self._failing_since = time.monotonic()
                delay = backoff_s(failures, cap_s=self.backoff_cap_s)
                log.warning(
                    "%s: %s: %s; retrying in %.1f s", self.name, type(exc).__name__, exc, delay
                )
                self._stop.wait(delay)

    def _relist(self) -> None:
        """List everything and deliver the difference from what the consumer holds."""
        self.lists += 1
        listed = list_whole(  # a continue token too old: from the start (ExpiredError at last)
            self._client,
            self.resource,
            chunk_size=self.list_chunk,
            what=self.name,
            fields=self.fields,
            labels=self.labels,
            **self._all_namespaces(),
        )
        fresh: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for obj in listed.items:
            try:
                key, uid, version = identity(obj)
            except BadObjectError as exc:
                log.warning("%s: list item skipped: %s", self.name, exc)
                continue
            fresh[key] = (uid, version, obj)
        list_version = listed.version
        gone = [k for k in self._known if k not in fresh]
        events: list[Event[T]] = [self._forget(k) for k in gone]
        for key, (uid, version, item) in fresh.items():
            known = self._known.get(key)
            if known is not None and known.uid != uid:
                events.append(self._forget(key))  # deleted and made again under that name
                known = None
            if known is None or known.version != version:
                events.extend(self._upsert(key, uid, version, item))
        self._deliver_list(events)
        self.version = list_version
        self._progress += 1
        if not self._synced.is_set():
            log.info("%s: synced, %d objects at version %s", self.name, len(fresh), list_version)
            self._synced.set()

    def _watch(self) -> None:
        """Watch from ``self.version`` until stopped, a resync is due, or an error."""
        if self._stop.is_set() or self._resync_due.is_set():
            return  # asked for while listing, when there was no watch to cut
        self.watches += 1
        stream = self._client.watch(
            self.resource,  # type: ignore[type-var]
            fields=self.fields,
            labels=self.labels,
            resource_version=self.version,
            server_timeout=int(self.watch_timeout_s * (1 + random.random())),
            on_error=self._on_error,
            **self._all_namespaces(),
        )
        events = _guarded(stream)
        try:
            for kind, obj in events:
                if kind == "BOOKMARK":
                    self._bookmark(obj)
                elif kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._event(kind, obj)
                if self._stop.is_set() or self._resync_due.is_set():
                    return
        finally:
            events.close()

    def _on_error(self, exc: Exception, count: int) -> OnErrorResult:
        """lightkube's hook: stop quietly when we cut the watch ourselves, else raise to the
        loop (which tells 410 from the rest and owns the backoff)."""
        if self._stop.is_set() or self._resync_due.is_set():
            return OnErrorResult(OnErrorAction.STOP)
        return OnErrorResult(OnErrorAction.RAISE)

    def _all_namespaces(self) -> dict[str, str]:
        return {"namespace": "*"} if issubclass(self.resource, NamespacedResource) else {}

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            key, uid, version = identity(obj)
        except BadObjectError as exc:
            log.warning("%s: %s event skipped: %s", self.name, kind, exc)
            return
        self.version = version
        self._progress += 1
        known = self._known.get(key)
        if kind == "DELETED":
            if known is not None:
                self._deliver(self._forget(key))
            return
        if known is not None and known.uid != uid:
            self._deliver(self._forget(key))
            known = None
        if known is None or known.version != version:
            for event in self._upsert(key, uid, version, obj):
                self._deliver(event)

    def _bookmark(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if isinstance(version, str) and 0 < len(version) <= MAX_VERSION_CHARS:
            self.version = version

    def _upsert(self, key: str, uid: str, version: str, obj: dict[str, Any]) -> list[Event[T]]:
        """Take ``obj`` in: the event it makes (none, or a DELETED for an object that turned
        unreadable), for the caller to deliver."""
        try:
            value = self.transform(obj)
        except Exception as exc:
            log.warning("%s: %s unreadable, treated as absent: %s", self.name, key, exc)
            return [self._forget(key)] if key in self._known else []
        known = self._known.get(key)
        self._known[key] = _Known(uid, version, value)
        return [Event(EventType.ADDED if known is None else EventType.MODIFIED, key, uid, value)]

    def _forget(self, key: str) -> Event[T]:
        """Drop ``key``: its DELETED event, for the caller to deliver."""
        known = self._known.pop(key)
        return Event(EventType.DELETED, key, known.uid, known.value)

    def _deliver(self, event: Event[T]) -> None:
        if self._batches is not None:
            self._batches.event(event)
            return
        try:
            self.consumer(event)
        except Exception:
            log.exception("%s: consumer failed on %s %s", self.name, event.type, event.key)

    def _deliver_list(self, events: list[Event[T]]) -> None:
        """A list's events: to ``listed`` at once when there is one, else one by one."""
        if self.listed is None:
            for event in events:
                self._deliver(event)
            return
        if not events:
            return
        if self._batches is not None:
            self._batches.listed(events)
            return
        try:
            self.listed(events)
        except Exception:
            log.exception("%s: consumer failed on a list of %d events", self.name, len(events))


def _guarded(stream: Iterator[tuple[str, Any]]) -> Generator[tuple[str, Any], None, None]:
    """The watch's events, with a 410 (as a status code or as an ERROR event) raised as
    :class:`ExpiredError`; other errors pass through."""
    try:
        yield from stream
    except ApiError as exc:
        if is_expired(exc):
            raise ExpiredError(str(exc)) from exc
        raise
