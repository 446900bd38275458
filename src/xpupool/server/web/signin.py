"""Sign in with a token, sign out: the only place a token passes through the dashboard.

The token comes in a POST body (never a URL), is checked as the API checks it, and is dropped:
the browser gets a random session id (``sessions.py``). The sign-in form itself is guarded by
the Origin/Referer check (login CSRF: another site cannot sign a browser into its account).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from xpupool.server.auth import TokenExpired
from xpupool.server.services import tenants
from xpupool.server.web.forms import FormDep, field
from xpupool.server.web.render import HEADERS, page
from xpupool.server.web.sessions import (
    COOKIE,
    MAX_TOKEN_CHARS,
    SESSION_TTL_S,
    CsrfRefused,
    check_csrf,
    same_origin,
)
from xpupool.server.web.viewer import PlaneDep, ViewerDep, sessions

router = APIRouter(include_in_schema=False)


@router.get("/signin", response_class=HTMLResponse)
def signin_page(request: Request) -> HTMLResponse:
    return page(request, None, "signin.html", error="")


@router.post("/signin")
def signin(request: Request, plane: PlaneDep, form: FormDep) -> Response:
    if not same_origin(request):
        raise CsrfRefused("cross-site sign-in refused: Origin/Referer is not this server")
    token = field(form, "token", MAX_TOKEN_CHARS).strip()
    try:
        who = tenants.authenticate(plane, token)
    except TokenExpired:
        who, error = None, "This token has expired."
    else:
        error = "Unknown or revoked token."
    if who is not None and who.role not in ("admin", "tenant"):
        who, error = None, "Agent and bootstrap tokens cannot sign in to the dashboard."
    if who is None:
        return page(request, None, "signin.html", status=401, error=error)
    earlier = request.cookies.get(COOKIE)
    if earlier:  # a new session id at every sign-in: one set before it is worth nothing
        sessions(request).close(earlier)
    session = sessions(request).open(token)
    response = RedirectResponse("/", status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        session.sid,
        max_age=int(SESSION_TTL_S),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/signout")
def signout(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    check_csrf(request, viewer.session, form.get("csrf"))
    sessions(request).close(viewer.session.sid)
    response = RedirectResponse("/signin", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
