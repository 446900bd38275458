"""Jinja2 pages with autoescaping on, and the headers every dashboard answer carries.

Every tenant-controlled string reaches a page only through ``{{ }}`` (escaped); no template
marks user data ``|safe``. The Content-Security-Policy allows scripts and styles from this server
only (no inline script, no inline style), so even a string that escaped escaping would not run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from xpupool.server.web.viewer import Viewer

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # our own forms send a Referer (the CSRF check reads it)
    "Cache-Control": "no-store",
}


def gib(mib: float | None) -> str:
    """MiB as GiB text with one decimal ('80.0 GiB'); '—' for an absent reading."""
    return "—" if mib is None else f"{mib / 1024:,.1f} GiB"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}%"


def when(unix_s: float | None) -> str:
    """Unix seconds as 'YYYY-MM-DD HH:MM:SS UTC'."""
    if unix_s is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix_s))


def num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def watts(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} W"


def cards(core_pct: float | None) -> str:
    """Compute counted 100 per card, as cards ('16', '2.5'); '—' when absent."""
    return "—" if core_pct is None else num(core_pct / 100)


def counted(value: float | str | None, word: str) -> str:
    """A count and its noun, singular for exactly one: '1 card', '2 cards', '2.5 cards'; a number
    as :func:`num` writes it, text (another filter's, such as :func:`cards`) as it is; '—' when
    absent. English plurals in -s only: the dashboard counts cards, nodes, jobs and samples."""
    text = value if isinstance(value, str) else num(value)
    if text == "—":
        return text
    return f"{text} {word}" if text == "1" else f"{text} {word}s"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        gib=gib, pct=pct, when=when, num=num, watts=watts, cards=cards, counted=counted
    )
    return env


ENV = _environment()


def render(name: str, **context: Any) -> str:
    return ENV.get_template(name).render(**context)


def page(
    request: Request, viewer: Viewer | None, name: str, status: int = 200, **context: Any
) -> HTMLResponse:
    """A whole page (or a fragment: a template that extends nothing) with the dashboard's
    headers; ``viewer`` None only for the sign-in page."""
    html = render(
        name,
        viewer=viewer,
        csrf=viewer.session.csrf if viewer is not None else "",
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)
