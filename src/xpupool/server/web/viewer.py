"""Who is looking at the dashboard: the session of the request and the principal behind it.

Every page and fragment takes :data:`ViewerDep`; it also records the principal for the audit
middleware (``server/audit_http.py``), so the admin's cordons from the dashboard are audited as
the API's are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.web.sessions import COOKIE, Session, SessionStore, SignInNeeded, live_principal


@dataclass(frozen=True, slots=True)
class Viewer:
    principal: Principal
    session: Session

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin

    @property
    def name(self) -> str:
        return "admin" if self.principal.is_admin else f"tenant {self.principal.tenant}"


def sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.web_sessions
    return store


def web_plane(request: Request) -> ControlPlane:
    plane: ControlPlane = request.app.state.plane
    return plane


def viewer(request: Request) -> Viewer:
    """The signed-in viewer, or :class:`SignInNeeded` (a redirect to /signin for pages)."""
    session = sessions(request).get(request.cookies.get(COOKIE))
    if session is None:
        raise SignInNeeded
    who = live_principal(web_plane(request), session.digest)
    if who is None:
        sessions(request).close(session.sid)
        raise SignInNeeded
    request.state.principal = who  # for the audit log
    return Viewer(who, session)


ViewerDep = Annotated[Viewer, Depends(viewer)]
PlaneDep = Annotated[ControlPlane, Depends(web_plane)]
