"""The submit form: a name, the compact request string, a command line, an image, environment
(``KEY=VALUE`` lines), a priority and retries, or instead a catalog model to serve or fine-tune
(the server plans its cards, image and command: docs/models.md), a queue (and for the admin, the
tenant to submit for). The form is read into the API's own body (``JobIn``) and judged by the
submission's own checks (``services/jobs.py``): live, through the small JSON endpoint
``/ui/validate`` the page posts the form to as you type (what a submission would refuse now,
storing nothing: the request's syntax, a request nothing in the pool could ever hold, a priority
above the queue's cap, an image no node could run), and on submit; an error is shown next to the
field it names."""

from __future__ import annotations

import shlex
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import ValidationError

from xpupool.model.errors import NotGranted, RequestError
from xpupool.model.job_text import env_pair, retry_causes
from xpupool.model.request_model import MAX_SPEC_CHARS
from xpupool.model.validation import error_path
from xpupool.server.audit_http import changes_nothing
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.services import jobs, models, tenants
from xpupool.server.web.forms import FormDep, field
from xpupool.server.web.render import HEADERS, page
from xpupool.server.web.sessions import check_csrf
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
LIMITS = {  # characters per field; the API's own bounds where it has them
    "name": 200,
    "request": MAX_SPEC_CHARS,
    "command": 20_000,
    "image": 500,
    "env": 20_000,
    "priority": 12,
    "max_retries": 6,
    "retry_on": 100,
    "model": 100,
    "task": 20,
    "queue": 63,
    "tenant": 63,
}
FIELDS = tuple(LIMITS)
TASKS = ("serve", "finetune")
_ALSO = {"spec": "request", "replicas": "request"}  # error heads shown at another field


def _where(path: str | None) -> str:
    """The form field an error path belongs to ('request.devices[0]' -> 'request')."""
    head = (path or "").split(".")[0].split("[")[0]
    head = _ALSO.get(head, head)
    return head if head in FIELDS else "form"


def _values(form: dict[str, str]) -> dict[str, str]:
    """The form's fields as typed (422 naming one that is too long)."""
    values = {name: field(form, name, limit) for name, limit in LIMITS.items()}
    values["task"] = values["task"] or "serve"
    return values


def _env(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (blank ones skipped) as the job's env; RequestError on ``env`` naming
    the line otherwise."""
    env: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                key, value = env_pair(line, "env")
            except RequestError as exc:
                raise RequestError("env", line, f"line {n}: {exc.reason}") from None
            env[key] = value
    return env


def _body(values: dict[str, str]) -> JobIn:
    """The API's body for the form; RequestError (a command or env that does not read) or
    ValidationError (the API's parser) naming the field otherwise."""
    try:
        argv = shlex.split(values["command"])
    except ValueError as exc:
        reason = f"cannot split into arguments: {exc}"
        raise RequestError("command", values["command"], reason) from None
    what: dict[str, Any] = {
        "request": values["request"] or None,
        "command": argv,
        "image": values["image"] or None,
    }
    if values["model"]:  # a model job: the server fills request, image and command
        what = {k: v for k, v in what.items() if v}  # given anyway: the API says which not to
        what["model"] = {"name": values["model"], "task": values["task"]}
    return JobIn.model_validate(
        {
            "name": values["name"],
            **what,
            "env": _env(values["env"]),
            "priority": values["priority"].strip() or None,
            "max_retries": values["max_retries"].strip() or None,
            "retry_on": retry_causes(values["retry_on"] or None),
            "queue": values["queue"] or None,
            "tenant": values["tenant"] or None,
        }
    )


def _refusal(exc: Exception) -> tuple[str, str]:
    """(field path, reason) of a refusal, in the API's words."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return error_path(first), str(first.get("msg"))
    assert isinstance(exc, RequestError | NotGranted)
    return exc.field, exc.reason


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


@router.post("/ui/validate")
@changes_nothing
def validate_form(request: Request, plane: PlaneDep, viewer: ViewerDep, form: FormDep) -> Response:
    """``{ok: true}``, or ``{ok: false, field, reason, at}`` (``at``: the form field to show it
    at) for the form as typed so far: what submitting it would refuse now, storing nothing. A
    POST with the session's CSRF secret, as every form: the form's text (its env values) never
    goes into a URL."""
    check_csrf(request, viewer.session, form.get("csrf"))
    answer: dict[str, Any] = {"ok": True}
    try:
        jobs.verdict(plane, viewer.principal, _body(_values(form)), complete=False)
    except (ValidationError, RequestError, NotGranted) as exc:
        path, reason = _refusal(exc)
        answer = {"ok": False, "field": path, "reason": reason, "at": _where(path)}
    return JSONResponse(answer, headers={"Cache-Control": "no-store"})


@router.post("/submit")
def submit_form(request: Request, plane: PlaneDep, viewer: ViewerDep, form: FormDep) -> Response:
    check_csrf(request, viewer.session, form.get("csrf"))
    values = _values(form)
    try:
        job = jobs.submit(plane, viewer.principal, _body(values))
    except (ValidationError, RequestError, NotGranted) as exc:
        path, reason = _refusal(exc)
        errors = {_where(path): f"{path}: {reason}" if path else reason}
        return _form_page(request, plane, viewer, values, errors, status=422)
    return RedirectResponse(f"/jobs/{job.id}", status_code=303, headers=HEADERS)
