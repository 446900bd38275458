"""Pydantic errors that name the field the way :class:`~xpupool.model.errors.RequestError` does.

A check deeper than pydantic's own location (a token inside a compact spec, a key inside an
object, one item of a list) raises :func:`field_error` with ``at``, the rest of the path, and the
offending ``value``; :func:`error_path` and :func:`error_value` read any pydantic error back as a
path (``request.devices.memory``) and the value to quote. The API, the CLI and the model's own
:func:`request_error` all read errors through these two, so every front names the same field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from xpupool.model.errors import RequestError

REQUEST_FIELD = "request_field"
_ROOTS = ("body", "query", "path")


def field_error(reason: str, value: object, at: str = "") -> PydanticCustomError:
    """A validation error whose message is ``reason``, quoting ``value``, ``at`` below the
    location pydantic gives it (empty: at that location)."""
    return PydanticCustomError(
        REQUEST_FIELD, "{reason}", {"reason": reason, "value": value, "at": at}
    )


def loc_path(loc: Sequence[int | str]) -> str:
    """pydantic's ``loc`` as a path: ('body', 'request', 'devices', 0) -> 'request.devices[0]'."""
    out = ""
    for part in loc[1:] if loc and loc[0] in _ROOTS else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or str(loc[0] if loc else "")


def error_path(error: Mapping[str, Any]) -> str:
    """The full path of one pydantic error, down to ``at`` when the check gave one."""
    base = loc_path(tuple(error.get("loc", ())))
    at = (error.get("ctx") or {}).get("at", "")
    if not at:
        return base
    if not base or base in _ROOTS:
        return str(at)
    return f"{base}{at}" if at.startswith("[") else f"{base}.{at}"


def error_value(error: Mapping[str, Any]) -> object:
    """The rejected value: the offending item when the check named one, else the input."""
    ctx = error.get("ctx") or {}
    return ctx["value"] if "value" in ctx else error.get("input")


def request_error(exc: ValidationError, root: str = "input") -> RequestError:
    """The first error of ``exc`` as one :class:`RequestError`; ``root`` names a whole-input error."""
    first = exc.errors()[0]
    return RequestError(error_path(first) or root, error_value(first), first.get("msg", "invalid"))
