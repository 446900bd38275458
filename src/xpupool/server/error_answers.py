"""What the API answers for an error: its status, its JSON body and its headers.

One mapping for every path a request can take: the app's exception handlers (``app.py``) and the
rate limiter's gate (``rate_limit.py``) both answer through it, so a refused request reads the
same whichever refused it.

``RequestError`` and pydantic validation -> 422 ``{field, value, reason}`` (validation adds
``errors``, one per bad item up to ``MAX_ERRORS``); ``NotFound`` -> 404; ``Conflict`` -> 409;
``Forbidden`` -> 403; ``NotGranted`` -> 403 and ``OverLimit`` -> 429; ``Unavailable`` -> 503;
an ``HTTPException`` -> its own status and headers. A body quotes at most ~200 characters of a
rejected value (``wire_values.quote``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from xpupool.model.errors import (
    Conflict,
    Forbidden,
    NotFound,
    NotGranted,
    OverLimit,
    RequestError,
    Unavailable,
)
from xpupool.model.validation import error_path, error_value
from xpupool.server.schemas.secrets import SECRET_FIELDS
from xpupool.server.wire_values import MAX_REASON, quote, shorten

MAX_ERRORS = 20  # entries of a validation error's "errors" list; one per bad item otherwise


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    status: int
    body: dict[str, object]
    headers: Mapping[str, str] = field(default_factory=dict)


def error_body(field: str | None, value: object, reason: str) -> dict[str, object]:
    """An error body that quotes at most ~200 characters of the value (and of a field path or a
    reason that embeds one): a megabyte-long field is not echoed back."""
    return {
        "field": None if field is None else shorten(field),
        "value": quote(value),
        "reason": shorten(reason, MAX_REASON),
    }


def validation_answer(errors: Sequence[Mapping[str, Any]]) -> ErrorAnswer:
    """422 for pydantic ``errors`` (each with a ``loc`` under 'body', 'query' or 'path'): the
    first one as ``field``/``value``/``reason``, all of them (up to ``MAX_ERRORS``) listed."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid input"}
    body = error_body(
        error_path(first), _unsecret(first, error_value(first)), str(first.get("msg"))
    )
    listed: list[dict[str, str | None]] = [
        {"field": shorten(error_path(e)), "reason": shorten(str(e.get("msg")), MAX_REASON)}
        for e in errors[:MAX_ERRORS]
    ]
    if len(errors) > MAX_ERRORS:
        listed.append({"field": None, "reason": f"{len(errors) - MAX_ERRORS} more"})
    body["errors"] = listed
    return ErrorAnswer(422, body)


def _unsecret(error: Mapping[str, Any], value: object) -> object:
    """``value`` as an answer may quote it: a secret's value (``schemas/secrets.py``) never is."""
    if any(part in SECRET_FIELDS for part in error.get("loc", ())):
        return None
    if isinstance(value, Mapping) and SECRET_FIELDS & value.keys():
        return {k: ("(hidden)" if k in SECRET_FIELDS else v) for k, v in value.items()}
    return value


def error_answer(exc: Exception) -> ErrorAnswer | None:
    """The answer for ``exc``, or None when it is not one the API answers (a bug: 500)."""
    if isinstance(exc, RequestError):
        return ErrorAnswer(422, error_body(exc.field, exc.value, exc.reason))
    if isinstance(exc, NotGranted):
        status = 429 if isinstance(exc, OverLimit) else 403
        return ErrorAnswer(status, error_body(exc.field, exc.value, exc.reason))
    if isinstance(exc, Forbidden):
        return ErrorAnswer(403, error_body(None, None, str(exc)))
    if isinstance(exc, NotFound):
        return ErrorAnswer(404, error_body(exc.kind, exc.name, str(exc)))
    if isinstance(exc, Conflict):
        return ErrorAnswer(409, error_body(None, None, str(exc)))
    if isinstance(exc, Unavailable):
        return ErrorAnswer(503, error_body(None, None, str(exc)))
    if isinstance(exc, HTTPException):
        return ErrorAnswer(
            exc.status_code, error_body(None, None, str(exc.detail)), dict(exc.headers or {})
        )
    return None
