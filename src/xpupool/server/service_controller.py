"""The service controller: keeps each service's replicas alive, ready, rolled and scaled.

A replica is an ordinary job, submitted through the one submission path (``services/jobs.py``) as
the service's tenant and placed by the one scheduling cycle; the controller never places anything.
Each pass (every second, or when woken by a change of a service) it reads every service, its
replica links and their jobs, and for each service decides, in this order (docs/services.md):

1. A replica whose job ended and that was not taken away is replaced after the restart backoff
   (doubled for each replica that ended since, capped; it starts over once a replica has been ready
   for ``restart.reset_after_s``), so a crash loop waits longer and longer and says so in the
   service's state, never spinning.
2. The replicas wanted: none while the service is stopped (its stored state: the tenant's, which
   no pass changes; a pass that read it before a stop or a start writes nothing over it), else
   between min and max by the requests in flight per ready replica (the
   proxy's counts, ``plane.service_traffic``), up at once, down only after the load has stayed low
   for the scaling window (Knative's and dstack's way).
3. A change of the job or the port (a new generation) rolls as Kubernetes' default rolling update
   does (max surge 1, max unavailable 0): one replica of the new generation is started; once it
   is ready, one of the old is taken away; until none is old.
4. A replica taken away (an old one, or one too many) is drained: it leaves the ready endpoints at
   once, and its job is cancelled once the proxy counts no request in flight to it, or after the
   drain timeout.

A service whose job names a site that runs services itself (a Kubernetes site:
``service_sites.py``) has no replica jobs: each pass decides its replicas by the same step 2 and
hands the site the whole set of its services (the site makes, scales, rolls and deletes its
Deployments and Services); its ready endpoints are the site's, read from EndpointSlices.

The controller is the plane's :class:`~xpupool.server.service_endpoints.Endpoints`: the ready,
non-draining replicas of each service, published whole after each pass.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpupool.model.errors import Unavailable, XpupoolError
from xpupool.server.plane import service_rows
from xpupool.server.schemas.jobs import FINAL_STATES, JobIn, JobPhase
from xpupool.server.schemas.services import ServiceIn, ServiceState
from xpupool.server.service_endpoints import Endpoint, Traffic
from xpupool.server.service_probe import Prober, Target
from xpupool.server.service_sites import (
    ServiceKey,
    ServiceSite,
    ServiceWant,
    service_site,
    service_sites,
)
from xpupool.server.services import jobs
from xpupool.server.services.models import expand_model_job
from xpupool.server.services.services import (
    ReplicaFacts,
    as_tenant,
    replica_facts,
    replica_job,
)

if TYPE_CHECKING:
    import httpx  # imported by run_services for the first replica to probe

    from xpupool.server.plane.control import ControlPlane

log = logging.getLogger("xpupool.services")
PASS_S = 1.0
"""Seconds between two passes when nothing wakes the controller."""


@dataclass(slots=True)
class _Restarts:
    """A service's restart budget, stored in its row (``restart_*``) whenever it changes, so
    that a restarted plane goes on with it (:meth:`stored`)."""

    ended: int = 0  # replicas ended since a replica was last ready long enough
    next_try: float = 0.0  # monotonic time before which no replica is started
    next_try_at: float | None = None  # the same as Unix time: what is stored (None: no wait)
    last: str = ""  # what ended last, for the state's reason

    @classmethod
    def stored(cls, row: dict[str, Any], now: float, mono: float) -> _Restarts:
        """The budget ``row`` holds, its wait timed on this plane's monotonic clock from
        ``now`` (Unix time) and ``mono``."""
        at = row.get("restart_at")
        next_try = mono + max(0.0, float(at) - now) if at is not None else 0.0
        ended = int(row.get("restart_step") or 0)
        return cls(ended, next_try, None if at is None else float(at), row.get("restart_why") or "")

    def record(self, what: str, spec: ServiceIn, mono: float, now: float) -> float:
        """One more replica ended (``what`` happened to it): the seconds until the next start,
        ``backoff_s`` doubled for each end since the last reset, at most ``backoff_max_s``."""
        self.ended += 1
        wait = min(spec.restart.backoff_s * 2 ** (self.ended - 1), spec.restart.backoff_max_s)
        self.next_try, self.next_try_at, self.last = mono + wait, now + wait, what
        return float(wait)

    def row(self) -> dict[str, Any]:
        """The columns that store it."""
        why = self.last or None
        return {"restart_step": self.ended, "restart_at": self.next_try_at, "restart_why": why}


@dataclass(slots=True)
class _Window:
    """A service's scaling window: since when the load has wanted fewer replicas, and the most
    it wanted meanwhile (what the service scales down to once the window has passed)."""

    low_since: float
    peak: int


class ServiceController:
    """Keeps the services of ``plane`` (see the module's docstring); the plane's endpoints."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.prober = Prober()
        self._ready: dict[tuple[str, str], tuple[Endpoint, ...]] = {}
        self._restarts: dict[int, _Restarts] = {}
        self._windows: dict[int, _Window] = {}
        self._stopping: set[int] = set()  # replica jobs this controller cancelled
        # services on a site that runs them: the last want of each (kept when a pass fails,
        # so that a failure never reads as a deletion), and the model expansion per generation
        self._wants: dict[ServiceKey, tuple[str, ServiceWant]] = {}
        self._expanded: dict[tuple[int, int], JobIn] = {}

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        return self._ready.get((tenant, service), ())

    def traffic(self) -> Traffic | None:
        traffic: Traffic | None = getattr(self.plane, "service_traffic", None)
        return traffic

    def services(self) -> set[tuple[str, str]]:
        """Every service of the last pass, as (tenant, name)."""
        return set(self._ready)

    def reconcile(self) -> None:
        """One pass over every service (see the module's docstring)."""
        plane = self.plane
        with plane.db.connect() as conn:
            rows = service_rows.listed(conn)
            links = service_rows.replicas(conn)
        facts = replica_facts(plane, [link.job_id for link in links])
        by_service: dict[int, list[Any]] = {}
        for link in links:
            by_service.setdefault(link.service_id, []).append(link)
        ready: dict[tuple[str, str], tuple[Endpoint, ...]] = {}
        wants: dict[ServiceKey, tuple[str, ServiceWant]] = {}
        for row in rows:
            key = (row["tenant"], row["name"])
            try:
                spec = ServiceIn.model_validate({**row["spec"], "tenant": None})
                site = service_site(self.plane, spec)
                service_links = by_service.get(row["id"], [])
                if site is None:
                    ready[key] = self._service(row, service_links, facts)
                else:
                    if key in self._wants:
                        wants[key] = self._wants[key]  # until this pass says otherwise
                    ready[key] = self._on_site(row, spec, site, service_links, facts, wants)
            except Unavailable:
                raise  # the store cannot be written: said once by the plane's health
            except Exception:  # one service's failure is not every service's
                log.exception("service %s of tenant %s: pass failed", row["name"], row["tenant"])
                ready[key] = tuple(self._ready.get(key, ()))
                if key in self._wants:
                    wants[key] = self._wants[key]
        self._ready = ready
        self._wants = wants
        for site in service_sites(self.plane):
            site.want_services({k: w for k, (name, w) in wants.items() if name == site.name})
        live = {(row["id"], row["generation"]) for row in rows}
        self._expanded = {k: v for k, v in self._expanded.items() if k in live}
        alive = {link.job_id for link in links}
        self.prober.keep_only(alive)
        self._stopping &= alive
        known = {row["id"] for row in rows}
        for book in (self._restarts, self._windows):
            for sid in [s for s in book if s not in known]:
                del book[sid]

    def _service(
        self, row: dict[str, Any], links: list[Any], facts: dict[int, ReplicaFacts]
    ) -> tuple[Endpoint, ...]:
        """One service's pass; its ready endpoints."""
        now = self.plane.clock()  # Unix time: what is stored and shown
        mono = self.plane.monotonic()  # what waits are timed with: a clock step moves it not
        spec = ServiceIn.model_validate({**row["spec"], "tenant": None})
        name, sid, generation = row["name"], row["id"], row["generation"]
        restarts = self._restarts.get(sid)
        if restarts is None:  # this plane's first pass over it: as stored
            restarts = self._restarts[sid] = _Restarts.stored(row, now, mono)
        stopped = row["state"] == ServiceState.STOPPED.value
        if stopped:  # a start is the tenant's: its replicas start at once, no backoff left over
            restarts.ended, restarts.next_try, restarts.next_try_at = 0, 0.0, None
        events: list[str] = []

        alive = []
        for link in links:
            fact = facts.get(link.job_id)
            if fact is not None and fact.state not in FINAL_STATES:
                alive.append(link)
                continue
            service_rows.unlink(self.plane, [link.job_id])
            if link.draining or stopped:
                continue
            what = f"replica {name}-{link.ordinal} {_ended(fact)}"
            events.append(f"{what}; next try in {restarts.record(what, spec, mono, now):g} s")

        for link in alive:
            target = _target(facts[link.job_id], spec)
            if target is not None:
                self.prober.watch(link.job_id, target)
            else:
                self.prober.forget(link.job_id)
        is_ready = {link.job_id for link in alive if self.prober.is_ready(link.job_id)}
        for link in alive:
            since = self.prober.ready_since(link.job_id)
            if since is not None and mono - since >= spec.restart.reset_after_s:
                restarts.ended = 0

        serving = [link for link in alive if link.job_id in is_ready and not link.draining]
        desired = 0 if stopped else self._desired(row, spec, mono)
        if desired != row["desired"]:
            events.append(f"scaled from {row['desired']} to {desired} replicas")
        active = [link for link in alive if not link.draining]
        old = [link for link in active if link.generation < generation]

        retire = active if stopped else _to_retire(active, old, is_ready, len(serving), desired)
        if retire:
            service_rows.drain(self.plane, [link.job_id for link in retire], now)
            for link in retire:
                events.append(f"draining replica {name}-{link.ordinal} (job {link.job_id})")
            gone = {link.job_id for link in retire}
            active = [link for link in active if link.job_id not in gone]
            old = [link for link in old if link.job_id not in gone]
            serving = [link for link in serving if link.job_id not in gone]
        self._drain(row, spec, alive, retire, is_ready, facts, now)

        missing = desired + (1 if old else 0) - len(active)
        waiting = missing > 0 and mono < restarts.next_try
        if missing > 0 and not waiting:
            for _ in range(missing):
                started = self._start(row, spec, restarts, mono)
                if started == "deleted":
                    return ()
                events.append(started)
                if started.startswith("cannot"):
                    waiting = True
                    break

        state, reason = self._state(row, spec, alive, old, serving, facts, restarts, waiting)
        values = {"state": state.value, "reason": reason, "desired": desired, "updated_at": now}
        values |= restarts.row()
        changed = any(row.get(k) != v for k, v in values.items() if k != "updated_at")
        if changed or events:
            moved = [reason] if row["state"] != state.value else []
            service_rows.change(self.plane, sid, values, [*events, *moved], stopped=stopped)
        return tuple(
            Endpoint(link.job_id, 0, target.host, target.port)
            for link in serving
            if (target := _target(facts[link.job_id], spec)) is not None
        )

    def _on_site(
        self,
        row: dict[str, Any],
        spec: ServiceIn,
        site: ServiceSite,
        links: list[Any],
        facts: dict[int, ReplicaFacts],
        wants: dict[ServiceKey, tuple[str, ServiceWant]],
    ) -> tuple[Endpoint, ...]:
        """One pass of a service on a site that runs it (the module's docstring): its want
        (into ``wants``), its state from the site's ready endpoints; replica jobs left from
        before it moved there are stopped."""
        now, mono = self.plane.clock(), self.plane.monotonic()
        tenant, name = row["tenant"], row["name"]
        events: list[str] = []
        for link in links:  # of a generation that ran on agent nodes
            fact = facts.get(link.job_id)
            if fact is None or fact.state in FINAL_STATES:
                service_rows.unlink(self.plane, [link.job_id])
            elif link.job_id not in self._stopping:
                why = f"service {name} moved to site {site.name}"
                service_rows.stop_jobs(self.plane, [link.job_id], why)
                self._stopping.add(link.job_id)
        desired = self._desired(row, spec, mono)
        if desired != row["desired"]:
            events.append(f"scaled from {row['desired']} to {desired} replicas")
        run = spec
        if spec.job.model is not None:  # the job changes only with the generation
            job = self._expanded.get((row["id"], row["generation"]))
            if job is None:
                job = expand_model_job(self.plane, spec.job, tenant)
                self._expanded[(row["id"], row["generation"])] = job
            run = spec.model_copy(update={"job": job})
        req = run.job.request.to_request() if run.job.request is not None else None
        queue = run.job.queue or (req.queue if req is not None and req.queue != "default" else "")
        want = ServiceWant(tenant, name, run, queue or tenant, desired)
        wants[(tenant, name)] = (site.name, want)
        ready = tuple(site.ready(tenant, name))
        problem = site.problem(tenant, name)
        if problem:
            state, reason = ServiceState.PENDING, f"site {site.name}: {problem}"
        elif len(ready) >= desired:
            state, reason = ServiceState.READY, f"{len(ready)}/{desired} replicas ready"
        elif ready:
            state, reason = ServiceState.DEGRADED, f"{len(ready)}/{desired} replicas ready"
        else:
            why = f"waiting for its Deployment's pods on site {site.name} to be ready"
            state, reason = ServiceState.STARTING, why
        values = {"state": state.value, "reason": reason, "desired": desired, "updated_at": now}
        if any(row[k] != values[k] for k in ("state", "reason", "desired")) or events:
            moved = [reason] if row["state"] != state.value else []
            service_rows.change(self.plane, row["id"], values, [*events, *moved])
        return ready

    def _desired(self, row: dict[str, Any], spec: ServiceIn, now: float) -> int:
        """Replicas wanted now (the module's step 2)."""
        low, high = spec.replicas.min, spec.replicas.upper
        current = min(max(int(row["desired"]), low), high)
        traffic = self.traffic()
        if traffic is None or low == high:
            self._windows.pop(row["id"], None)
            return current
        in_flight = int(traffic.in_flight(row["tenant"], row["name"]))
        want = min(max(math.ceil(in_flight / spec.scaling.target_in_flight), low), high)
        if want >= current:
            self._windows.pop(row["id"], None)
            return want
        window = self._windows.get(row["id"])
        if window is None:
            self._windows[row["id"]] = _Window(now, want)
            return current
        window.peak = max(window.peak, want)
        if now - window.low_since < spec.scaling.window_s:
            return current
        del self._windows[row["id"]]
        return int(window.peak)

    def _drain(
        self,
        row: dict[str, Any],
        spec: ServiceIn,
        alive: list[Any],
        retired: list[Any],
        is_ready: set[int],
        facts: dict[int, ReplicaFacts],
        now: float,
    ) -> None:
        """Cancel each draining replica's job once no request is in flight to it (or it was
        not serving, or the drain timeout has passed)."""
        traffic = self.traffic()
        just = {link.job_id for link in retired}
        stop = []
        for link in alive:
            if not (link.draining or link.job_id in just) or link.job_id in self._stopping:
                continue
            since = now if link.job_id in just else (link.drain_since or now)
            target = _target(facts[link.job_id], spec)
            busy = 0
            if traffic is not None and target is not None and link.job_id in is_ready:
                busy = traffic.in_flight_at(Endpoint(link.job_id, 0, target.host, target.port))
            if busy == 0 or now - since >= spec.scaling.drain_timeout_s:
                stop.append(link.job_id)
        if stop:
            service_rows.stop_jobs(self.plane, stop, f"replica of service {row['name']} taken away")
            self._stopping.update(stop)

    def _start(self, row: dict[str, Any], spec: ServiceIn, restarts: _Restarts, now: float) -> str:
        """Submit one replica of the current generation; the event that says so."""
        ordinal = service_rows.take_ordinal(self.plane, row["id"])
        if ordinal is None:
            return "deleted"  # meanwhile: the next pass forgets it
        name = f"{row['name']}-{ordinal}"
        try:
            job = jobs.submit(self.plane, as_tenant(row["tenant"]), replica_job(spec, name))
        except (XpupoolError, ValueError) as exc:
            what = f"replica {name} was refused: {exc}"
            wait = restarts.record(what, spec, now, self.plane.clock())
            return f"cannot start replica {name}: {exc}; next try in {wait:g} s"
        if not service_rows.link(self.plane, row["id"], job.id, ordinal, row["generation"]):
            service_rows.stop_jobs(self.plane, [job.id], f"service {row['name']} deleted")
            return "deleted"
        return f"started replica {name} (job {job.id}), generation {row['generation']}"

    def _state(
        self,
        row: dict[str, Any],
        spec: ServiceIn,
        alive: list[Any],
        old: list[Any],
        serving: list[Any],
        facts: dict[int, ReplicaFacts],
        restarts: _Restarts,
        waiting: bool,
    ) -> tuple[ServiceState, str]:
        """The service's state and its reason, from what this pass saw and did."""
        name = row["name"]
        if row["state"] == ServiceState.STOPPED.value:
            ending = f": {len(alive)} replica(s) ending" if alive else ""
            return ServiceState.STOPPED, f"stopped{ending}"
        desired = max(row["desired"], spec.replicas.min)
        if old:
            new = len([link for link in alive if link.generation == row["generation"]])
            why = f"generation {row['generation']}: {new} new replica(s), {len(old)} old to go"
            return ServiceState.UPDATING, why
        if waiting:
            wait = max(0.0, restarts.next_try - self.plane.monotonic())
            return ServiceState.RESTARTING, f"restarting: {restarts.last}, next try in {wait:.0f} s"
        if serving and len(serving) >= desired:
            return ServiceState.READY, f"{len(serving)}/{desired} replicas ready"
        if serving:
            return ServiceState.DEGRADED, f"{len(serving)}/{desired} replicas ready"
        running = [link for link in alive if facts[link.job_id].state == JobPhase.RUNNING]
        if running:
            first = running[0]
            error = self.prober.last_error(first.job_id) or "not probed yet"
            why = f"waiting for replica {name}-{first.ordinal} to be ready ({error})"
            return ServiceState.STARTING, why
        if alive:
            first = alive[0]
            why = f"replica {name}-{first.ordinal}: {facts[first.job_id].reason}"
            return ServiceState.PENDING, why
        return ServiceState.PENDING, "no replica yet"


def _target(fact: ReplicaFacts, spec: ServiceIn) -> Target | None:
    """Where a running replica is probed and reached: its node's address and the node port its
    agent reported for it (none yet: not probed)."""
    if fact.state != JobPhase.RUNNING or fact.host is None or fact.port is None:
        return None
    return Target(fact.host, fact.port, spec.readiness)


def _ended(fact: ReplicaFacts | None) -> str:
    """How a replica's job ended, in the words of a reason."""
    if fact is None:
        return "is gone"
    if fact.state == JobPhase.FAILED and fact.exit_code is not None:
        return f"exited {fact.exit_code}"
    if fact.state == JobPhase.SUCCEEDED:
        return "exited 0"
    return f"{fact.state.value}: {fact.reason}"


def _to_retire(
    active: list[Any], old: list[Any], is_ready: set[int], serving: int, desired: int
) -> list[Any]:
    """The replicas to take away now (the module's steps 3 and 4): while old ones remain, one
    old replica once there is one too many, never leaving fewer than ``desired`` serving (an
    unready old one goes first, it serves nothing); else the replicas beyond ``desired``,
    unready ones first, then the newest."""
    if old:
        if len(active) <= desired:
            return []
        unready = [link for link in old if link.job_id not in is_ready]
        if unready:
            return unready[:1]
        return old[:1] if serving - 1 >= desired else []
    surplus = len(active) - desired
    if surplus <= 0:
        return []
    order = sorted(active, key=lambda link: (link.job_id in is_ready, -link.ordinal))
    return order[:surplus]


async def run_services(controller: ServiceController, period_s: float = PASS_S) -> None:
    """The controller's loop on the server's event loop: a pass (in a thread: it reads and writes
    the store and takes the plane's lock as any writer does, never on the loop the scheduling
    passes share) whenever woken and every ``period_s``, then the probes that are due, started as
    tasks of their own; until cancelled."""
    plane = controller.plane
    # Made for the first replica to probe: importing httpx cost the start a fifth of a CPU second
    # on the event loop (docs/benchmarks.md, start-up), and a pool may run no service at all.
    client: httpx.AsyncClient | None = None
    try:
        while True:
            await plane.services_wake.wait(period_s)
            try:
                await asyncio.to_thread(controller.reconcile)
            except Unavailable:
                pass  # the store cannot be written: said once by the plane's health
            except Exception:
                log.exception("service controller pass failed")
            else:
                traffic = controller.traffic()
                if traffic is not None:  # on this loop, the one the proxy counts on
                    traffic.keep_only(controller.services())
            if client is None and controller.prober.watching:
                import httpx

                client = httpx.AsyncClient(trust_env=False)
            if client is not None:
                controller.prober.start_due(client, plane.monotonic())
    finally:
        if client is not None:
            await client.aclose()
