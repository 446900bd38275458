"""HAMi's node lock, taken by the extender's bind so that HAMi's device plugin serves each pod its own
cards.

HAMi's device plugin learns which pod a kubelet ``Allocate`` is for from the Node annotation
``hami.io/mutex.lock: <RFC 3339 time>,<namespace>,<pod>``: the lock's owner first, and only without
a lock the first Pending pod bound to the node whose ``hami.io/bind-phase`` is ``allocating`` or
``success`` (HAMi ``pkg/util/util.go`` ``GetPendingPod``). HAMi's scheduler writes the lock before
the Binding and the device plugin deletes it once the pod's cards are allocated
(``pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go``: ``PodAllocationSuccess`` /
``PodAllocationFailed`` call ``nodelock.ReleaseNodeLock`` with the owner check). Two pods bound to
one node without it are served in name order, not bind order: a pod gets another's cards or fails
admission (issue 56).

Written from HAMi v2.10.0 (commit 4707fb02c91c) ``pkg/util/nodelock/nodelock.go``: the value is
written by a merge patch carrying the Node's ``resourceVersion`` (optimistic concurrency); a lock
older than ``NodeLockTimeout`` (5 minutes, ``HAMI_NODELOCK_EXPIRE``) is expired and taken over, as
is one whose owner pod no longer exists; a lock naming the binding pod is already its own; a
release deletes the lock only when it still names its owner (a value without ``,`` is HAMi's
legacy form, a time alone). Where HAMi refuses a bind to a locked node (kube-scheduler then backs
off, 1 s doubling to 10 s), :class:`NodeLocks` holds the bind until the lock is free, within a
budget kept under kube-scheduler's ``httpTimeout``: it reads the Node again whenever the extender's
Node watch sees it change (:meth:`NodeLocks.node_changed`), and polls as a fallback. Binds to
other nodes go on meanwhile (one waiter per node reads, the rest queue behind it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from xpupool.k8s.codec.hami import kind_by_register_key
from xpupool.k8s.codec.node_annotations import parse_rfc3339
from xpupool.model.errors import RequestError, XpupoolError

log = logging.getLogger(__name__)

LOCK_KEY = "hami.io/mutex.lock"  # nodelock.NodeLockKey
SEPARATOR = ","  # nodelock.NodeLockSep
EXPIRY_S = 300.0
"""HAMi's ``NodeLockTimeout`` default: a lock older than this is stale, whoever holds it."""
WAIT_S = 25.0
"""How long a bind waits for a locked node, counted from the bind's start: the chart's
``httpTimeout`` is 30 s, and the pod's annotation patch and Binding still have to fit after it."""
FIRST_POLL_S = 0.02
MAX_POLL_S = 0.2
"""Polling a locked node starts at 20 ms and doubles to 200 ms, at most one bind per node: the
fallback for a release the Node watch has not reported (or no watch, in tests)."""
RELEASE_TRIES = 5  # as HAMi's DefaultStrategy.Steps

_FIELD = f"metadata.annotations[{LOCK_KEY}]"


class LockMode(StrEnum):
    """Which nodes a bind locks: ``auto`` those that carry one of HAMi's registration annotations
    (``hami.io/node-nvidia-register``, ...: HAMi's device plugin runs there and reads the lock),
    ``on`` every node, ``off`` none (no HAMi device plugin anywhere, or one that registers
    nodes through xpupool's agent ``--hami-register``)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class NodeApiError(XpupoolError):
    """A Node read or write the apiserver refused; the message says which and why."""


class NodeConflictError(NodeApiError):
    """The Node changed since it was read (409 on a patch carrying its resourceVersion)."""


class NodeLockBusyError(XpupoolError):
    """The node stayed locked by another pod for the whole wait; nothing was written. The bind
    answers ``Error`` and kube-scheduler tries the pod again."""

    def __init__(self, node: str, holder: str, waited_s: float) -> None:
        self.node, self.holder, self.waited_s = node, holder, waited_s
        super().__init__(
            f"node {node} is locked by HAMi's node lock ({LOCK_KEY}: {holder!r}) "
            f"for the {waited_s:.1f} s this bind could wait"
        )


@dataclass(frozen=True, slots=True)
class LockValue:
    """A decoded lock. ``namespace`` and ``pod`` are empty in HAMi's legacy form (a time alone),
    whose owner cannot be told."""

    taken_at: datetime  # timezone-aware
    namespace: str
    pod: str


def encode_lock(taken_at: datetime, namespace: str, pod: str) -> str:
    """The lock value HAMi writes (``GenerateNodeLockKeyByPod``): Go's ``time.RFC3339`` layout to
    the second, then namespace and pod name. Written in UTC (``Z``), as Go formats ``time.Now()``
    in a container whose zone is UTC; a naive ``taken_at`` is UTC."""
    if taken_at.tzinfo is None:
        taken_at = taken_at.replace(tzinfo=UTC)
    stamp = taken_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return SEPARATOR.join((stamp, namespace, pod))


def decode_lock(text: object) -> LockValue:
    """A lock value as HAMi's ``ParseNodeLock`` reads it: without ``,`` a time alone (legacy),
    else exactly three parts. Raises ``RequestError`` naming the annotation for anything else
    (HAMi's device plugin cannot read such a lock either)."""
    if not isinstance(text, str):
        raise RequestError(_FIELD, type(text).__name__, "expected a string")
    if SEPARATOR not in text:
        return LockValue(parse_rfc3339(_FIELD, text), "", "")
    parts = text.split(SEPARATOR)
    if len(parts) != 3:
        raise RequestError(
            _FIELD, text[:120], f"expected <time>,<namespace>,<pod>: {len(parts)} parts"
        )
    return LockValue(parse_rfc3339(_FIELD, parts[0]), parts[1], parts[2])


def held_by(text: str, namespace: str, pod: str) -> bool:
    """Whether a lock value names this pod, by HAMi's test (a ``,`` in it and the suffix
    ``,<namespace>,<pod>``): the release's owner check and "already ours" both use it."""
    return SEPARATOR in text and text.endswith(f"{SEPARATOR}{namespace}{SEPARATOR}{pod}")


def expired(lock: LockValue, now: datetime, expiry_s: float = EXPIRY_S) -> bool:
    """A lock taken more than ``expiry_s`` before ``now`` is stale (HAMi: ``time.Since(lockTime) >
    NodeLockTimeout``): its holder's allocation never came, and the next bind takes it over."""
    return now - lock.taken_at > timedelta(seconds=expiry_s)


def runs_hami_device_plugin(annotations: Mapping[str, Any]) -> bool:
    """Whether a Node carries one of HAMi's registration annotations: its device plugin runs there
    and finds the pod it allocates for through the lock."""
    return any(kind_by_register_key(str(key)) is not None for key in annotations)


class NodeLockApi(Protocol):
    """The API calls the lock makes."""

    def get_node(self, name: str) -> dict[str, Any]:
        """The Node as the apiserver's JSON; raises NodeApiError."""
        ...

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Merge ``annotations`` (None deletes a key) into the Node if it is still at
        ``resource_version``; raises NodeConflictError on 409, NodeApiError otherwise."""
        ...

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the pod is certainly gone (404, or another pod by that name when ``uid`` is
        set); False whenever the API cannot say."""
        ...


class NodeLocks:
    """Takes and releases HAMi's node lock for binds. Thread-safe; binds to different nodes never
    wait on each other, binds to one node wait in turn for the lock."""

    def __init__(
        self,
        api: NodeLockApi,
        mode: LockMode = LockMode.AUTO,
        *,
        wait_s: float = WAIT_S,
        expiry_s: float = EXPIRY_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        """``sleep`` replaces the wait between two reads of a locked Node (tests with a fake
        clock); by default that wait ends early when :meth:`node_changed` names the Node."""
        self.api, self.mode, self.wait_s, self.expiry_s = api, mode, wait_s, expiry_s
        self.now, self.monotonic, self.sleep = now, monotonic, sleep
        self._turns: dict[str, threading.Lock] = {}  # node -> its waiters' turn
        self._changed: dict[str, threading.Event] = {}  # node -> changed since the last read
        self._turns_lock = threading.Lock()
        self.waits = 0  # binds that found their node locked by another pod (for metrics, tests)
        self.takeovers = 0  # expired or orphaned locks overwritten

    def acquire(self, node: str, namespace: str, pod: str, budget_s: float | None = None) -> bool:
        """Lock ``node`` for pod ``namespace/pod`` before its Binding is posted. Returns True when
        the pod holds the lock now (release it if the bind then fails), False when the node
        needs none (``mode``). Waits while another pod holds a live lock, for ``budget_s`` (default
        ``wait_s``); raises :class:`NodeLockBusyError` when that runs out, ``RequestError`` for a
        lock value nobody can read, :class:`NodeApiError` when the API refuses."""
        if self.mode is LockMode.OFF:
            return False
        budget = self.wait_s if budget_s is None else budget_s
        start = self.monotonic()
        deadline = start + max(0.0, budget)
        turn = self._turn(node)
        if not turn.acquire(timeout=max(0.0, deadline - start)):
            raise NodeLockBusyError(node, "(another bind to this node is waiting)", budget)
        try:
            return self._take(node, namespace, pod, start, deadline)
        finally:
            turn.release()

    def release(self, node: str, namespace: str, pod: str) -> bool:
        """Delete the lock if it still names this pod (HAMi's ``ReleaseNodeLock`` with its owner
        check), retrying a conflicting write; True when this call deleted it. Never raises: it
        runs on a bind's failure path, and a lock it could not delete expires."""
        for _ in range(RELEASE_TRIES):
            try:
                meta = _meta(self.api.get_node(node))
                value = _annotations(meta).get(LOCK_KEY)
                if not isinstance(value, str) or not held_by(value, namespace, pod):
                    return False
                self.api.patch_node_annotations(node, _version(meta), {LOCK_KEY: None})
                return True
            except NodeConflictError:
                continue
            except NodeApiError as exc:
                log.warning("releasing the lock of %s/%s on %s: %s", namespace, pod, node, exc)
                return False
        log.warning("releasing the lock of %s/%s on %s kept conflicting", namespace, pod, node)
        return False

    def node_changed(self, node: str) -> None:
        """The Node watch saw ``node`` change: a bind waiting for its lock reads it again now."""
        changed = self._changed.get(node)
        if changed is not None:
            changed.set()

    def _turn(self, node: str) -> threading.Lock:
        with self._turns_lock:
            turn = self._turns.get(node)
            if turn is None:
                turn = self._turns[node] = threading.Lock()
                self._changed[node] = threading.Event()
            return turn

    def _pause(self, node: str, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            self._changed[node].wait(seconds)

    def _take(self, node: str, namespace: str, pod: str, start: float, deadline: float) -> bool:
        """Read the node, and write our lock when it is free, stale, orphaned or ours; else poll
        until ``deadline``."""
        poll = FIRST_POLL_S
        waited = False
        checked: set[str] = set()  # lock values whose owner pod was looked up
        while True:
            self._changed[node].clear()  # a change from here on ends the next pause
            meta = _meta(self.api.get_node(node))
            annotations = _annotations(meta)
            if self.mode is LockMode.AUTO and not runs_hami_device_plugin(annotations):
                return False
            value = annotations.get(LOCK_KEY)
            if value is None or self._free(value, namespace, pod, checked):
                if isinstance(value, str) and held_by(value, namespace, pod):
                    return True  # ours already (a bind retried after a failure we did not see)
                mine = encode_lock(self.now(), namespace, pod)
                try:
                    self.api.patch_node_annotations(node, _version(meta), {LOCK_KEY: mine})
                except NodeConflictError:
                    continue  # the node changed under us: read it again
                if value is not None:
                    self.takeovers += 1
                    log.info("node %s: took over HAMi's node lock %r", node, value)
                return True
            if not waited:
                waited = True
                self.waits += 1
            left = deadline - self.monotonic()
            if left <= 0:
                raise NodeLockBusyError(node, str(value), self.monotonic() - start)
            self._pause(node, min(poll, left))
            poll = min(poll * 2, MAX_POLL_S)

    def _free(self, value: object, namespace: str, pod: str, checked: set[str]) -> bool:
        """Whether an existing lock may be (over)written by this pod: its own, expired, or naming a
        pod that no longer exists (HAMi's dangling-lock check, once per lock value seen)."""
        if isinstance(value, str) and held_by(value, namespace, pod):
            return True
        lock = decode_lock(value)
        if expired(lock, self.now(), self.expiry_s):
            return True
        if lock.pod and value not in checked:
            checked.add(str(value))
            return self.api.pod_gone(lock.namespace, lock.pod, "")
        return False


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotations(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = meta.get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _version(meta: Mapping[str, Any]) -> str:
    return str(meta.get("resourceVersion") or "")
