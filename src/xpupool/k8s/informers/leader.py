"""Leader election on a coordination.k8s.io/v1 Lease, so that of two extender replicas one acts.

The protocol is client-go's (k8s.io/client-go tools/leaderelection/leaderelection.go and
resourcelock/leaselock.go at 32ce75a7), so a replica of ours and any client-go elector agree on who
leads: ``tryAcquireOrRenew`` reads the Lease; a holder other than us is respected while the record
we last *observed changing* is younger than its ``leaseDurationSeconds`` by our own monotonic clock
(no trust in the other replica's wall clock); otherwise we write ourselves in with a
resourceVersion-guarded update (a conflict means someone else won). Taking over from another
holder bumps ``leaseTransitions`` and sets ``acquireTime``; renewing keeps both and moves
``renewTime``. A leader that cannot renew within ``renew_deadline_s`` stops leading. Stopping
releases as ``tryRelease`` does: empty ``holderIdentity``, ``leaseDurationSeconds: 1``, so a
standby takes over at once instead of after the lease runs out. Times are written as MicroTime
(RFC 3339 with microseconds, UTC), the Lease API's format.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError

from xpupool.k8s.informers.kubeconfig import RawLease, make_client

log = logging.getLogger(__name__)

JITTER = 1.2  # client-go's JitterFactor for the acquire loop


def micro_time(at: datetime) -> str:
    """``at`` as metav1.MicroTime's JSON form: ``2006-01-02T15:04:05.000000Z`` (UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for Lease ``namespace/name`` as ``identity`` on a thread of its own.

    ``on_started``/``on_stopped`` run on that thread when leadership is won and lost. Defaults
    are kube-scheduler's (15 s lease, 10 s renew deadline, 2 s retry). :attr:`is_leader` is safe
    to read from any thread and turns False by itself once a renewal is overdue.
    """

    def __init__(
        self,
        config: SingleConfig,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: int = 15,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not identity or len(identity) > 253:
            raise ValueError("identity: must be 1..253 characters")
        if not lease_duration_s > renew_deadline_s > retry_period_s * JITTER > 0:
            raise ValueError(
                "lease_duration_s > renew_deadline_s > retry_period_s * 1.2 > 0 is required "
                "(client-go's rule: a leader must be able to retry before its lease runs out)"
            )
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.clock = clock
        self.wall = wall
        self._client = make_client(config, timeout_s=max(1.0, renew_deadline_s / 2))
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._observed: tuple[Any, ...] | None = None  # its spec when it last changed
        self._observed_at = 0.0  # our clock then
        self._observed_duration = 0  # its leaseDurationSeconds
        self.holder = ""  # its holderIdentity
        self._leading = False
        self._renewed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True, timeout_s: float = 10.0) -> None:
        """Stop campaigning; when leading and ``release``, give the Lease up first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if release and self._leading:
            self.release()
        self._set_leading(False)
        self._client.close()

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self.clock() - self._renewed_at < self.renew_deadline_s

    def wait_leader(self, timeout_s: float) -> bool:
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            if self.is_leader:
                return True
            time.sleep(0.05)
        return self.is_leader

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self._try()
            if ok:
                self._renewed_at_now()
                self._set_leading(True)
                wait = self.retry_period_s
            else:
                if self.holder and self.holder != self.identity:
                    self._set_leading(False)  # someone else holds it: certainly not us
                elif self._leading and self.clock() - self._renewed_at >= self.renew_deadline_s:
                    log.warning("lease %s: not renewed in time, stopped leading", self.name)
                    self._set_leading(False)
                wait = self.retry_period_s * (1 + random.random() * (JITTER - 1))
            self._stop.wait(wait)

    def _try(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as exc:  # the apiserver unreachable, a conflict, a bad Lease
            log.info("lease %s: %s: %s", self.name, type(exc).__name__, exc)
            return False

    def _renewed_at_now(self) -> None:
        with self._lock:
            self._renewed_at = self.clock()

    def _set_leading(self, leading: bool) -> None:
        with self._lock:
            changed = leading != self._leading
            self._leading = leading
        if not changed:
            return
        log.info("lease %s: %s", self.name, "leading" if leading else "not leading")
        callback = self.on_started if leading else self.on_stopped
        if callback is not None:
            try:
                callback()
            except Exception:
                log.exception("lease %s: callback failed", self.name)

    # ------------------------------------------------------------------ one step
    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: True if we hold the Lease after it.
        Raises ApiError on a conflict or an apiserver error."""
        now = micro_time(self.wall())
        try:
            lease = self._get()
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            self._lease = self._create(self._record(now, now, 0))
            self._observe(self._lease)
            return True
        spec = _spec(lease)
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and self._valid():
            return False
        if holder == self.identity:
            acquired, transitions = spec.get("acquireTime") or now, _int(spec, "leaseTransitions")
        else:
            acquired, transitions = now, _int(spec, "leaseTransitions") + 1
        lease["spec"] = self._record(now, acquired, transitions)
        self._lease = self._replace(lease)
        self._observe(self._lease)
        return True

    def release(self) -> bool:
        """client-go's ``tryRelease``: if we hold the Lease, empty its holder and shorten it to
        1 s so another replica may take it now. True if released (or not ours)."""
        try:
            lease = self._get()
            spec = _spec(lease)
            if spec.get("holderIdentity") != self.identity:
                return True
            now = micro_time(self.wall())
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": _int(spec, "leaseTransitions"),
            }
            self._replace(lease)
            return True
        except Exception as exc:
            log.warning("lease %s: release failed: %s", self.name, exc)
            return False

    def _record(self, now: str, acquired: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        """Remember when the Lease's record last changed, by our clock (client-go's
        ``observedTime``): a holder is judged by how long we have seen it not renew."""
        spec = _spec(lease)
        record = tuple(sorted((k, str(v)) for k, v in spec.items()))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()
            self._observed_duration = _int(spec, "leaseDurationSeconds")
            holder = spec.get("holderIdentity")
            self.holder = holder if isinstance(holder, str) else ""

    def _valid(self) -> bool:
        return self.clock() < self._observed_at + self._observed_duration

    # ------------------------------------------------------------------ API calls
    def _get(self) -> dict[str, Any]:
        return dict(self._client.get(RawLease, self.name, namespace=self.namespace))

    def _create(self, spec: dict[str, Any]) -> dict[str, Any]:
        body = RawLease.from_dict(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
        )
        return dict(self._client.create(body))

    def _replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        """PUT with the resourceVersion we read: a 409 if anyone wrote in between."""
        return dict(self._client.replace(RawLease.from_dict(lease)))


def _spec(lease: dict[str, Any]) -> dict[str, Any]:
    spec = lease.get("spec")
    return dict(spec) if isinstance(spec, dict) else {}


def _int(spec: dict[str, Any], field: str) -> int:
    value = spec.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        return 0
    return value
