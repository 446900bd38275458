"""The store's side of services (``server/services/services.py`` is the API's side, and
``server/service_controller.py`` keeps their replicas). Services change no book of the plane;
their writes go through the plane's one writer, as volumes' and secrets' do, so a store that
cannot write answers 503 and changes nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, insert, select, update

from xpupool.model.errors import Conflict, NotFound
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane.secret_rows import Store
from xpupool.server.schemas.jobs import FINAL_STATES, JobPhase, StopCause
from xpupool.server.schemas.services import ServiceState
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.services import service_events as t_events
from xpupool.server.storage.services import service_replicas as t_replicas
from xpupool.server.storage.services import services as t_services

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

STOPPED, PENDING = ServiceState.STOPPED.value, ServiceState.PENDING.value
MAX_EVENTS = 200
"""Events kept per service: the newest; a crash loop adds one per restart."""


def create(plane: Store, values: dict[str, Any], reason: str) -> int:
    """Store a new service (its first event too); :class:`Conflict` if its tenant has one of
    that name."""
    with plane.write() as conn:
        if get(conn, values["tenant"], values["name"]) is not None:
            raise Conflict(f"service {values['name']!r} exists: change it with PUT")
        sid = int(conn.execute(insert(t_services).values(**values)).inserted_primary_key[0])
        _service_event(conn, sid, values["created_at"], values["state"], reason)
        return sid


def get(conn: Connection, tenant: str, name: str) -> dict[str, Any] | None:
    where = (t_services.c.tenant == tenant) & (t_services.c.name == name)
    row = conn.execute(select(t_services).where(where)).mappings().first()
    return None if row is None else dict(row)


def listed(conn: Connection, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every service (of ``tenant``; None: of all), by tenant and name."""
    q = select(t_services).order_by(t_services.c.tenant, t_services.c.name)
    if tenant is not None:
        q = q.where(t_services.c.tenant == tenant)
    return [dict(r) for r in conn.execute(q).mappings()]


def change(
    plane: Store,
    sid: int,
    values: dict[str, Any],
    reasons: Iterable[str] = (),
    stopped: bool | None = None,
) -> None:
    """Update service ``sid``'s row, and add an event for each of ``reasons`` (in its state
    after the update). ``stopped`` (the controller's): only while the service is still stopped,
    or still not, as the pass read it; a stop or a start in between wins, and the next pass
    works from it."""
    with plane.write() as conn:
        where = t_services.c.id == sid
        if stopped is not None:
            is_stopped = t_services.c.state == STOPPED
            where = where & (is_stopped if stopped else ~is_stopped)
        if not conn.execute(update(t_services).where(where).values(**values)).rowcount:
            return  # deleted (or stopped, or started) meanwhile: no event of that
        state = conn.execute(select(t_services.c.state).where(where)).scalar()
        for reason in reasons:
            _service_event(conn, sid, values["updated_at"], str(state), reason)


def stop(plane: Store, sid: int, name: str, now: float) -> None:
    """Stop service ``sid`` (named ``name``): stored as its state, so that no pass and no
    restarted plane keeps a replica; its replicas are taken away (drained, then ended by the
    controller). :class:`Conflict` when it is stopped already; :class:`NotFound` when gone."""
    with plane.write() as conn:
        state = _state(conn, sid, name)
        if state == STOPPED:
            raise Conflict(f"service {name!r} is stopped already")
        values = {"state": STOPPED, "reason": "stopped", "desired": 0, "updated_at": now}
        conn.execute(update(t_services).where(t_services.c.id == sid).values(**values))
        draining = (t_replicas.c.service_id == sid) & ~t_replicas.c.draining
        conn.execute(update(t_replicas).where(draining).values(draining=True, drain_since=now))
        _service_event(conn, sid, now, STOPPED, "stopped")


def start(plane: Store, sid: int, name: str, desired: int, now: float) -> None:
    """Start stopped service ``sid`` again with ``desired`` replicas (its min); the controller
    starts them. :class:`Conflict` when it is not stopped; :class:`NotFound` when gone."""
    with plane.write() as conn:
        state = _state(conn, sid, name)
        if state != STOPPED:
            raise Conflict(f"service {name!r} is not stopped: it is {state}")
        values = {
            "state": PENDING,
            "reason": "started: waiting for the controller to start its replicas",
            "desired": desired,
            "updated_at": now,
        }
        conn.execute(update(t_services).where(t_services.c.id == sid).values(**values))
        _service_event(conn, sid, now, PENDING, "started")


def _state(conn: Connection, sid: int, name: str) -> str:
    state = conn.execute(select(t_services.c.state).where(t_services.c.id == sid)).scalar()
    if state is None:
        raise NotFound("service", name)
    return str(state)


def stop_jobs(plane: ControlPlane, job_ids: Iterable[int], why: str) -> None:
    """Cancel the jobs of ``job_ids`` that have not ended, as a user's cancel does."""
    ids = sorted(job_ids)
    if not ids:
        return
    with plane.write() as conn:
        q = select(t_jobs.c.id, t_jobs.c.state).where(t_jobs.c.id.in_(ids))
        for job_id, state in conn.execute(q).all():
            if JobPhase(state) not in FINAL_STATES:
                plane.apply(conn, job_id, lc.Stop(StopCause.CANCELLED, why))


def remove(plane: Store, sid: int) -> list[int]:
    """Forget service ``sid``, its links and events; the job ids of its replicas."""
    with plane.write() as conn:
        jobs = [r.job_id for r in replicas(conn, sid)]
        conn.execute(delete(t_replicas).where(t_replicas.c.service_id == sid))
        conn.execute(delete(t_events).where(t_events.c.service_id == sid))
        conn.execute(delete(t_services).where(t_services.c.id == sid))
        return jobs


def replicas(conn: Connection, sid: int | None = None) -> list[Any]:
    """The replica links of service ``sid`` (None: of every service), by ordinal."""
    q = select(t_replicas).order_by(t_replicas.c.service_id, t_replicas.c.ordinal)
    if sid is not None:
        q = q.where(t_replicas.c.service_id == sid)
    return list(conn.execute(q))


def link(plane: Store, sid: int, job_id: int, ordinal: int, generation: int) -> bool:
    """Link job ``job_id`` to service ``sid`` as its replica ``ordinal``; False (nothing
    linked) when the service was deleted meanwhile."""
    with plane.write() as conn:
        if conn.execute(select(t_services.c.id).where(t_services.c.id == sid)).first() is None:
            return False
        values = {"service_id": sid, "ordinal": ordinal, "generation": generation}
        conn.execute(insert(t_replicas).values(job_id=job_id, draining=False, **values))
        return True


def take_ordinal(plane: Store, sid: int) -> int | None:
    """The next replica's <n> (from 1), counted in the service's row so that no two share one;
    None when the service was deleted meanwhile."""
    with plane.write() as conn:
        where = t_services.c.id == sid
        conn.execute(update(t_services).where(where).values(started=t_services.c.started + 1))
        found = conn.execute(select(t_services.c.started).where(where)).scalar()
        return None if found is None else int(found)


def drain(plane: Store, job_ids: Iterable[int], now: float) -> None:
    with plane.write() as conn:
        where = t_replicas.c.job_id.in_(sorted(job_ids))
        conn.execute(update(t_replicas).where(where).values(draining=True, drain_since=now))


def unlink(plane: Store, job_ids: Iterable[int]) -> None:
    with plane.write() as conn:
        conn.execute(delete(t_replicas).where(t_replicas.c.job_id.in_(sorted(job_ids))))


def _service_event(conn: Connection, sid: int, at: float, state: str, reason: str) -> None:
    """One event of a service (never of a job: only the job lifecycle writes those); the oldest
    beyond ``MAX_EVENTS`` go."""
    row = {"service_id": sid, "at": at, "state": state, "reason": reason}  # a service's state
    conn.execute(insert(t_events).values(row))
    count = conn.execute(
        select(func.count()).select_from(t_events).where(t_events.c.service_id == sid)
    ).scalar_one()
    if count > MAX_EVENTS:
        keep = (
            select(t_events.c.id)
            .where(t_events.c.service_id == sid)
            .order_by(t_events.c.id.desc())
            .limit(MAX_EVENTS)
        )
        where = (t_events.c.service_id == sid) & t_events.c.id.not_in(keep)
        conn.execute(delete(t_events).where(where))


def events(conn: Connection, sid: int) -> list[dict[str, Any]]:
    q = select(t_events).where(t_events.c.service_id == sid).order_by(t_events.c.id)
    return [dict(r) for r in conn.execute(q).mappings()]
