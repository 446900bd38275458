"""The web dashboard served by ``xpupool up`` at ``/``: server-rendered pages (Jinja2, autoescaped),
server-drawn SVG, a little plain JavaScript from ``static/``, no front-end build step.

A module per page; ``sessions.py`` signs browsers in and guards forms against CSRF; ``data.py``
is the one seam to the fleet data services. :func:`mount` adds it all to the API's app.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from xpupool.server.web import overview, signin
from xpupool.server.web.render import HEADERS, STATIC, page
from xpupool.server.web.sessions import CsrfRefused, SessionStore, SignInNeeded

__all__ = ["mount"]


def mount(app: FastAPI) -> None:
    """Add the dashboard's routes, static files and session store to ``app``."""
    app.state.web_sessions = SessionStore()
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (signin, overview):
        app.include_router(module.router)

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, _: SignInNeeded) -> Response:
        if request.url.path.startswith("/ui/"):  # a fragment or JSON: the page script redirects
            return JSONResponse({"reason": "sign in first"}, status_code=401)
        return RedirectResponse("/signin", status_code=303, headers=HEADERS)

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, exc: CsrfRefused) -> Response:
        return page(request, None, "refused.html", status=403, reason=exc.reason)
