"""Where the dashboard's fleet figures come from: the one seam between pages and data services.

The overview and history pages call only :func:`overview` and :func:`history` (and the card
panel :func:`device_recent`). They read the data services of ``server/services/overview.py``
(``fleet_overview``) and ``server/history.py`` (``history_series``) when this release has them;
a release without them answers from the engine's state and the live metrics here, with the same
fields, so the pages work either way. Everything is returned as plain dicts and lists of numbers
and strings: the shape of the API's JSON answers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from xpupool.server import schemas as s
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane

WINDOWS = {"1h": 60.0, "1d": 15 * 60.0, "1w": 2 * 3600.0}  # window -> step, seconds
BUSY_PCT = 5.0  # a card whose utilisation reads at least this is busy


def _service(module: str, name: str) -> Callable[..., Any] | None:
    """``module.name`` when this release has it; None when the module or the name is not there.
    Any other failure to import it is raised: a broken service is not hidden by the fallback."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None
    service: Callable[..., Any] | None = getattr(found, name, None)
    return service


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def overview(plane: ControlPlane, principal: Principal) -> dict[str, Any]:
    """Fleet totals per (site, vendor, model), stranded capacity, pending jobs by reason and job
    counts; for a tenant, the jobs figures count its own jobs only."""
    service = _service("xpupool.server.services.overview", "fleet_overview")
    if service is not None:
        return dict(_plain(service(plane, principal)))
    return _overview_here(plane, principal)


def history(
    plane: ControlPlane, window: str, site: str | None, model: str | None
) -> dict[str, Any]:
    """``{window, step_s, series: [{name, site, model, points: [[t, v], ...]}]}``; a release that
    keeps no history answers the window with no series."""
    service = _service("xpupool.server.history", "history_series")
    if service is not None:
        return dict(_plain(service(plane, window, site, model)))
    return {"window": window, "step_s": WINDOWS[window], "series": []}


def device_recent(plane: ControlPlane, uuid: str) -> list[tuple[float, float]]:
    """``(t, utilisation %)`` samples of one card, oldest first: its recent readings when this
    release keeps them (``services/fleet.py`` ``device_detail``), else the live reading alone
    (none when the probe reads no utilisation)."""
    service = _service("xpupool.server.services.fleet", "device_detail")
    if service is not None:
        recent = _plain(service(plane, uuid)).get("recent", [])
        return [
            (float(r["t"]), float(r["util_pct"])) for r in recent if r.get("util_pct") is not None
        ]
    reading = plane.metrics.get(uuid)
    if reading is None or reading.utilization_pct is None:
        return []
    return [(plane.clock(), float(reading.utilization_pct))]


def _overview_here(plane: ControlPlane, principal: Principal) -> dict[str, Any]:
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    with plane.lock:
        st = plane.cluster_state
        mem_free, core_free = st.dev_mem_free.reshape(-1), st.dev_core_free.reshape(-1)
        mem_commit, core_commit = st.dev_mem_commit.reshape(-1), st.dev_core_commit.reshape(-1)
        healthy = st.dev_healthy.reshape(-1)
        for rec in plane.node_records.values():
            for d in rec.node.devices:
                found = st.catalog.lookup(d.model, d.vendor)
                key = (rec.node.site, d.vendor, found.name if found is not None else d.model)
                g = groups.get(key)
                if g is None:
                    g = groups[key] = _empty_group(*key)
                slot = st.uuid_slot[d.uuid]
                mem_alloc = int(mem_commit[slot] - mem_free[slot])
                core_alloc = int(core_commit[slot] - core_free[slot])
                m = plane.metrics.get(d.uuid)
                util = m.utilization_pct if m is not None else None
                g["devices_total"] += 1
                g["devices_allocated"] += int(mem_alloc > 0 or core_alloc > 0)
                g["devices_busy"] += int(util is not None and util >= BUSY_PCT)
                g["memory_mib_total"] += d.memory_mib
                g["memory_mib_allocated"] += mem_alloc
                g["memory_mib_used"] += (m.memory_used_mib or 0) if m is not None else 0
                g["core_pct_total"] += 100
                g["core_pct_allocated"] += core_alloc / 10
                g["core_pct_used"] += util or 0.0
                g["power_w"] += (m.power_w or 0.0) if m is not None else 0.0
                g["cordoned"] += int(
                    rec.cordoned or d.uuid in rec.cordoned_devices or d.uuid in rec.draining
                )
                g["unhealthy"] += int(not healthy[slot])
        stranded = plane.engine.stranded()
        mine = principal.is_admin
        pending = [p for p in plane.queued.values() if mine or p.tenant == principal.tenant]
        held = [h for h in plane.held_jobs.values() if mine or h.tenant == principal.tenant]
        running = sum(1 for h in held if h.state is s.JobPhase.RUNNING)
    by_reason: dict[str, int] = {}
    for p in pending:
        text = p.reason or "not tried yet"
        by_reason[text] = by_reason.get(text, 0) + 1
    return {
        "generated_at": plane.clock(),
        "groups": [groups[k] for k in sorted(groups)],
        "stranded": {
            "memory_mib": 0 if stranded is None else stranded.total_memory_mib,
            "core_pct": 0.0 if stranded is None else stranded.total_core_milli / 10,
            "devices": None,
        },
        "pending_by_reason": dict(sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
        "jobs": {"pending": len(pending), "running": running, "holding": len(held)},
    }


def _empty_group(site: str, vendor: str, model: str) -> dict[str, Any]:
    return {
        "site": site,
        "vendor": vendor,
        "device_model": model,
        "devices_total": 0,
        "devices_allocated": 0,
        "devices_busy": 0,
        "memory_mib_total": 0,
        "memory_mib_allocated": 0,
        "memory_mib_used": 0,
        "core_pct_total": 0,
        "core_pct_allocated": 0.0,
        "core_pct_used": 0.0,
        "power_w": 0.0,
        "cordoned": 0,
        "unhealthy": 0,
    }
