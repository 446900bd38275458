"""Queues and tenants: each queue's quota used against nominal and borrowed, its pending jobs in
the order admission takes them with the reason each waits, and its running jobs; for the admin,
every tenant with its limits. A tenant sees its own queues only (``services/tenants.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from xpupool.server.plane import ControlPlane
from xpupool.server.services import tenants
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.web.render import page
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
SHOWN = 50  # jobs listed per queue and kind; the rest are counted


def _names(plane: ControlPlane, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    with plane.db.connect() as conn:
        rows = conn.execute(select(t_jobs.c.id, t_jobs.c.name).where(t_jobs.c.id.in_(ids))).all()
    return {int(r.id): str(r.name) for r in rows}


def _jobs_of(
    plane: ControlPlane, names: set[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The pending jobs of queues ``names`` in the order the next pass tries them, and their
    running jobs; read from one state of the plane (:meth:`ControlPlane.read`)."""
    waiting = sorted((p for p in plane.queued.values() if p.queue in names), key=lambda p: p.id)
    order = plane.admission.order([(p.request, p.queue) for p in waiting])
    ranked = [waiting[i] for i in order]
    pending: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rank, p in enumerate(ranked, 1):
        pending[p.queue].append(
            {"id": p.id, "rank": rank, "priority": p.priority, "reason": p.reason}
        )
    running: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for h in sorted(plane.held_jobs.values(), key=lambda h: h.id):
        if h.queue in names:
            nodes = sorted({a.node for a in h.allocations})
            running[h.queue].append({"id": h.id, "state": h.state.value, "nodes": ", ".join(nodes)})
    return pending, running


def queues_context(plane: ControlPlane, viewer: Viewer) -> dict[str, Any]:
    listed = tenants.list_queues(plane, viewer.principal)
    names = {q.name for q in listed}
    pending, running = plane.read(lambda: _jobs_of(plane, names))
    shown = [j["id"] for q in names for j in pending[q][:SHOWN] + running[q][:SHOWN]]
    job_names = _names(plane, shown)
    return {
        "queues": listed,
        "pending": pending,
        "running": running,
        "job_names": job_names,
        "shown": SHOWN,
        "tenants": tenants.list_tenants(plane) if viewer.is_admin else [],
    }


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, plane: PlaneDep, viewer: ViewerDep) -> HTMLResponse:
    return page(request, viewer, "queues.html", **queues_context(plane, viewer))


@router.get("/ui/queues", response_class=HTMLResponse)
def queues_fragment(request: Request, plane: PlaneDep, viewer: ViewerDep) -> HTMLResponse:
    return page(request, viewer, "queues_live.html", **queues_context(plane, viewer))
