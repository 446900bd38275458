"""The submit form: a name, the compact request string and a command line, or instead a catalog
model to serve or fine-tune (the server plans its cards, image and command: docs/models.md), a
queue (and for the admin, the tenant to submit for). The request is read by the API's own parser
(``JobIn``) both live, through the small JSON endpoint ``/ui/validate`` the page calls as you
type, and on submit; an error is shown next to the field it names."""

from __future__ import annotations

import shlex
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import ValidationError

from xpupool.model.errors import NotGranted, RequestError
from xpupool.model.request_model import MAX_SPEC_CHARS
from xpupool.model.validation import error_path
from xpupool.server import schemas as s
from xpupool.server.services import jobs, models, tenants
from xpupool.server.web.forms import FormDep, field
from xpupool.server.web.render import HEADERS, page
from xpupool.server.web.sessions import check_csrf
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
FIELDS = ("name", "request", "command", "model", "task", "queue", "tenant")
TASKS = ("serve", "finetune")


def _where(path: str | None) -> str:
    """The form field an error path belongs to ('request.devices[0]' -> 'request')."""
    head = (path or "").split(".")[0].split("[")[0]
    if head == "spec":
        return "request"
    return head if head in FIELDS else "form"


def _check(text: str) -> tuple[str, str] | None:
    """(field path, reason) of the first error the API's parser finds in a request string."""
    try:
        s.JobIn.model_validate({"request": text or None})
    except ValidationError as exc:
        first = exc.errors()[0]
        return error_path(first) or "request", str(first.get("msg"))
    return None


def _form_page(
    request: Request,
    plane: PlaneDep,
    viewer: Viewer,
    values: dict[str, str],
    errors: dict[str, str],
    status: int = 200,
) -> HTMLResponse:
    queues = [q.name for q in tenants.list_queues(plane, viewer.principal)]
    tenant_names = [t.name for t in tenants.list_tenants(plane)] if viewer.is_admin else []
    return page(
        request,
        viewer,
        "submit.html",
        status=status,
        values=values,
        errors=errors,
        queues=queues,
        tenant_names=tenant_names,
        max_spec=MAX_SPEC_CHARS,
        models=[m.name for m in models.list_models()],
        tasks=TASKS,
    )


@router.get("/submit", response_class=HTMLResponse)
def submit_page(request: Request, plane: PlaneDep, viewer: ViewerDep) -> HTMLResponse:
    return _form_page(request, plane, viewer, dict.fromkeys(FIELDS, ""), {})


@router.get("/ui/validate")
def validate_request(
    viewer: ViewerDep, request: Annotated[str, Query(max_length=MAX_SPEC_CHARS)] = ""
) -> JSONResponse:
    """``{ok}`` or ``{ok: false, field, reason}`` for a compact request string."""
    found = _check(request)
    body: dict[str, Any] = {"ok": True}
    if found is not None:
        body = {"ok": False, "field": found[0], "reason": found[1]}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.post("/submit")
def submit_form(request: Request, plane: PlaneDep, viewer: ViewerDep, form: FormDep) -> Response:
    check_csrf(request, viewer.session, form.get("csrf"))
    values = {
        "name": field(form, "name", 200),
        "request": field(form, "request", MAX_SPEC_CHARS),
        "command": field(form, "command", 20_000),
        "model": field(form, "model", 100),
        "task": field(form, "task", 20) or "serve",
        "queue": field(form, "queue", 63),
        "tenant": field(form, "tenant", 63),
    }
    errors: dict[str, str] = {}
    try:
        argv = shlex.split(values["command"])
    except ValueError as exc:
        argv = []
        errors["command"] = f"cannot split into arguments: {exc}"
    if not errors:
        try:
            what: dict[str, Any] = {"request": values["request"] or None, "command": argv}
            if values["model"]:  # a model job: the server fills request, image and command
                what = {"model": {"name": values["model"], "task": values["task"]}}
                if values["request"] or argv:
                    what.update(request=values["request"] or None, command=argv)
            body = s.JobIn.model_validate(
                {
                    "name": values["name"],
                    **what,
                    "queue": values["queue"] or None,
                    "tenant": values["tenant"] or None,
                }
            )
            job = jobs.submit(plane, viewer.principal, body)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = error_path(first)
            errors[_where(path)] = f"{path}: {first.get('msg')}" if path else str(first.get("msg"))
        except (RequestError, NotGranted) as exc:
            errors[_where(exc.field)] = f"{exc.field}: {exc.reason}" if exc.field else exc.reason
        else:
            return RedirectResponse(f"/jobs/{job.id}", status_code=303, headers=HEADERS)
    return _form_page(request, plane, viewer, values, errors, status=422)
