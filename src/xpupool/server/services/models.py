"""``GET /v1/models``, ``POST /v1/plan`` and ``JobIn.model``: the model catalog against the pool.

The planner (``catalog/plan.py``) is pure; this module hands it the pool as plain records (per
node and card model: cards, the biggest link group, wholly free cards in one group, read from
the engine's columns under the plane's lock) and turns a model job into an ordinary one: the best
plan row that the engine says the pool can ever hold (driver and card checked by the same
filters that place jobs) becomes the device request, the software needs, the runtime's image
and its command with the model and parallelism filled in.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from xpupool.catalog.image_needs import merge_image_needs
from xpupool.catalog.models import ModelCatalog, ModelSpec, load_models
from xpupool.catalog.plan import PlanInput, PlanRow, PoolNode, plan
from xpupool.engine.state import ClusterState
from xpupool.engine.verdict import Miss
from xpupool.model.errors import RequestError
from xpupool.model.request_model import RequestModel
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.schemas.models import CatalogModel, ModelIntent
from xpupool.server.schemas.models import PlanRow as PlanRowView
from xpupool.server.services.model_cache import with_model_cache

SERVE_PORT_ENV = "XPUPOOL_SERVE_PORT"
MODEL_ENV = "XPUPOOL_MODEL"


def list_models() -> list[CatalogModel]:
    return [
        CatalogModel.model_validate(
            {**asdict(m), "aliases": list(m.aliases), "precisions": list(m.precisions)}
            | {"runtimes": list(m.runtimes)}
        )
        for m in load_models().models
    ]


def pool_nodes(state: ClusterState, *, containers_only: bool = False) -> list[PoolNode]:
    """Per schedulable, alive node and card model: what :func:`plan` needs. A card counts as
    free when nothing is committed on it; cards without a link group form one PCIe group.
    ``containers_only``: only nodes with a container runtime (a model job runs an image)."""
    nodes: list[PoolNode] = []
    ok = state.node_ok & state.node_container if containers_only else state.node_ok
    for i in np.flatnonzero(ok):
        usable = state.dev_usable[i]
        models = {int(m) for m in state.dev_model[i][usable]}
        for model_id in sorted(models):
            mask = usable & (state.dev_model[i] == model_id)
            free = mask & (state.dev_mem_free[i] == state.dev_mem_commit[i])
            free &= state.dev_core_free[i] == state.dev_core_commit[i]
            groups = state.dev_group[i][mask]
            fast = bool((groups >= 0).all()) and len(groups) > 0
            if fast:
                group_cards = int(np.bincount(groups).max())
                free_groups = state.dev_group[i][free]
                free_group = int(np.bincount(free_groups).max()) if len(free_groups) else 0
            else:
                group_cards, free_group = int(mask.sum()), int(free.sum())
            vendor, printed = state.models[model_id]
            known = state.catalog.lookup(printed, vendor)
            nodes.append(
                PoolNode(
                    name=state.node_names[i],
                    vendor=vendor,
                    device_model=printed if known is None else known.name,
                    card_mib=int(state.dev_mem_total[i][mask].min()),
                    cards=int(mask.sum()),
                    group_cards=group_cards,
                    fast_link=fast,
                    free_cards=int(free.sum()),
                    free_group_cards=free_group,
                )
            )
    return nodes


def _plan_input(models: ModelCatalog, body: ModelIntent, at: str) -> tuple[ModelSpec, PlanInput]:
    spec = models.get(body.name, f"{at}name")
    return spec, PlanInput(
        spec,
        task=body.task,
        precision=body.precision,
        context=body.context,
        concurrency=body.concurrency,
        method=body.method,
    )


def plan_rows(plane: ControlPlane, body: ModelIntent, at: str = "") -> list[PlanRowView]:
    """The plan for ``body`` against the pool now; errors name ``<at><field>``."""
    models = load_models()
    _, request = _plan_input(models, body, at)
    pool, catalog = plane.read_columns(lambda state: (pool_nodes(state), state.catalog))
    try:
        rows = plan(request, catalog, models, pool, judge=lambda r: _judged(plane, models, r))
    except RequestError as exc:
        raise RequestError(f"{at}{exc.field}", exc.value, exc.reason) from None
    return [PlanRowView.model_validate(asdict(r)) for r in rows]


def _judged(plane: ControlPlane, models: ModelCatalog, row: PlanRow) -> PlanRow:
    """``row`` with the verdict a submission of it would get: a row whose serving job no node
    could ever run (a driver too old for the runtime's CUDA, no container runtime beside the
    cards) does not fit, now or later, and says why."""
    if not (row.feasible and row.in_pool and row.runtime):
        return row
    miss = _row_miss(plane, models, row)
    if miss is None:
        return row
    return replace(row, fits_now=False, reason=miss.reason)


def _row_miss(plane: ControlPlane, models: ModelCatalog, row: PlanRow) -> Miss | None:
    """The engine's never-fits verdict on the serving job of ``row``, as submitted: an image job,
    with the runtime catalog's software needs and its image's own (both hold)."""
    assert row.runtime is not None
    image = models.runtime(row.runtime).image
    req = replace(_job_request(models, row).to_request(), container=True)
    req = merge_image_needs(req, image, plane.image_catalog, keep_given=False).request
    return plane.never_fits(req)


def expand_model_job(plane: ControlPlane, body: JobIn, tenant: str) -> JobIn:
    """``body`` with its ``model`` turned into request, image, command and env (model cleared),
    and the operator's model cache mounted at the runtime's cache path (model_cache.py).

    Picks the best-ranked row that the pool has, that has a serving runtime for its vendor, and
    that the engine says some nodes could hold when empty (card, driver and software needs); a
    row that fits now ranks first. Raises :class:`RequestError` on ``model.*`` otherwise.
    """
    intent = body.model
    assert intent is not None
    if intent.task != "serve":
        reason = "submit runs serving jobs; plan a finetune with POST /v1/plan (no training image)"
        raise RequestError("model.task", intent.task, reason)
    models = load_models()
    spec, request = _plan_input(models, intent, "model.")
    pool, catalog = plane.read_columns(
        lambda state: (pool_nodes(state, containers_only=True), state.catalog)
    )
    try:
        rows = plan(request, catalog, models, pool, judge=lambda r: _judged(plane, models, r))
        resolved = request.resolved()
    except RequestError as exc:
        raise RequestError(f"model.{exc.field}", exc.value, exc.reason) from None
    misses: list[str] = []
    for row in rows:
        if not (row.feasible and row.in_pool and row.runtime):
            continue
        if row.reason:  # judged: a submission of this row would be refused, and why
            misses.append(f"{row.device_model}: {row.reason}")
            continue
        candidate = _job_request(models, row, kind=spec.name)
        runtime = models.runtime(row.runtime)
        assert resolved.context is not None
        argv = runtime.argv(
            model=intent.model_path or spec.hub_id,
            tp=row.tensor_parallel,
            pp=row.pipeline_parallel,
            port=runtime.port,
            max_model_len=resolved.context,
        )
        env = {MODEL_ENV: spec.hub_id, SERVE_PORT_ENV: str(runtime.port), **body.env}
        expanded = body.model_copy(
            update={
                "model": None,
                "request": candidate,
                "image": runtime.image,
                "command": argv,
                "port": runtime.port if body.port is None else body.port,
                "env": env,
                "name": body.name or f"{spec.name}-serve",
            }
        )
        return with_model_cache(plane, expanded, tenant, runtime)
    served = [r.device_model for r in rows if r.in_pool and r.feasible and r.runtime]
    if not served and not misses:
        misses = _misses_off_runtime_nodes(plane, models, request)
    why = "; ".join(misses[:5]) if misses else "no card type of the pool has a runtime and room"
    if not served and not misses:
        why = (
            f"no card type of the pool can serve {spec.name} at {resolved.precision} with a "
            "catalogued runtime (see POST /v1/plan)"
        )
    raise RequestError("model.name", intent.name, why)


def _misses_off_runtime_nodes(
    plane: ControlPlane, models: ModelCatalog, request: PlanInput
) -> list[str]:
    """When no card type on nodes with a container runtime can serve the model: why the card
    types on the other nodes cannot (their verdict names the missing runtime, and where the
    runtimes are), so the refusal names the constraint that failed, not "no card type"."""
    everywhere, catalog = plane.read_columns(lambda state: (pool_nodes(state), state.catalog))
    rows = plan(request, catalog, models, everywhere, judge=lambda r: _judged(plane, models, r))
    return [
        f"{row.device_model}: {row.reason}"
        for row in rows
        if row.feasible and row.in_pool and row.runtime and row.reason
    ]


def _job_request(models: ModelCatalog, row: PlanRow, kind: str | None = None) -> RequestModel:
    """The device request of one plan row: whole cards of that model and vendor, the runtime's
    software needs, one link group for a tensor group, one replica per pipeline stage; ``kind``
    the job type, the served model's name: its speeds are learned and planned under it (issue
    55), not under its runtime's image, which every model the runtime serves shares."""
    assert row.runtime is not None
    runtime = models.runtime(row.runtime)
    devices: dict[str, object] = {
        "count": row.tensor_parallel,
        "vendors": [row.vendor],
        "models": [row.device_model],
        "software": list(runtime.software),
    }
    if row.tensor_parallel > 1 and row.link not in ("pcie", "pcie (slower)"):
        devices["topology"] = "same-link-group"
    data: dict[str, object] = {"devices": devices}
    if row.nodes > 1:
        data |= {"replicas": row.nodes, "gang": True}
    if kind is not None:
        data["kind"] = kind
    return RequestModel.model_validate(data)
