"""The web dashboard served by ``xpupool up`` at ``/``: server-rendered pages (Jinja2, autoescaped),
server-drawn SVG, a little plain JavaScript from ``static/``, no front-end build step.

A module per page; ``sessions.py`` signs browsers in and guards forms against CSRF; ``data.py``
is the one seam to the fleet data services. :func:`mount` adds it all to the API's app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from xpupool.model.errors import Conflict, NotFound, NotGranted, OverLimit, RequestError
from xpupool.server.web import devices, jobs, overview, queues, signin, submit, usage
from xpupool.server.web.render import HEADERS, STATIC, page
from xpupool.server.web.sessions import CsrfRefused, SessionStore, SignInNeeded

__all__ = ["mount"]

API_PREFIXES = ("/v1/", "/docs", "/redoc", "/openapi.json", "/metrics", "/healthz", "/ui/")
Handler = Callable[[Request, Exception], Awaitable[Response]]


def _is_page(request: Request) -> bool:
    """True for a dashboard page (HTML errors); the API and the fragments keep JSON errors."""
    return not request.url.path.startswith(API_PREFIXES)


def _error_page(request: Request, status: int, reason: str) -> Response:
    return page(request, None, "error.html", status=status, reason=reason, code=status)


def _html_on_pages(app: FastAPI, kind: type[Exception], reason: Callable[[Exception], str]) -> None:
    """Errors of ``kind`` answer a page with an HTML page; the API keeps its JSON handler."""
    api: Handler | None = app.exception_handlers.get(kind)  # type: ignore[assignment]

    async def handler(request: Request, exc: Exception) -> Response:
        if _is_page(request) or api is None:
            status = getattr(exc, "status_code", None) or _STATUS.get(type(exc), 422)
            return _error_page(request, int(status), reason(exc))
        return await api(request, exc)

    app.add_exception_handler(kind, handler)


_STATUS: dict[type[Exception], int] = {
    NotFound: 404,
    Conflict: 409,
    RequestError: 422,
    NotGranted: 403,
    OverLimit: 429,
}


def mount(app: FastAPI) -> None:
    """Add the dashboard's routes, static files and session store to ``app``. Call it after the
    API's exception handlers are in place: its pages answer errors in HTML, the API in JSON."""
    app.state.web_sessions = SessionStore(app.state.plane)  # kept in the store: take-overs
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (signin, overview, devices, queues, jobs, submit, usage):
        app.include_router(module.router)

    _html_on_pages(app, HTTPException, lambda e: str(getattr(e, "detail", e)))
    _html_on_pages(app, NotFound, str)
    _html_on_pages(app, Conflict, str)
    _html_on_pages(app, RequestError, lambda e: f"{getattr(e, 'field', '')}: {e}")
    _html_on_pages(app, NotGranted, str)
    _html_on_pages(app, RequestValidationError, lambda e: "invalid input in the address")

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, _: SignInNeeded) -> Response:
        if request.url.path.startswith("/ui/"):  # a fragment or JSON: the page script redirects
            return JSONResponse({"reason": "sign in first"}, status_code=401)
        return RedirectResponse("/signin", status_code=303, headers=HEADERS)

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, exc: CsrfRefused) -> Response:
        return _error_page(request, 403, exc.reason)
