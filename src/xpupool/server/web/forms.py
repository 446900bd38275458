"""Form posts read without a multipart parser: the dashboard's forms are all
``application/x-www-form-urlencoded``, which the standard library reads, so FastAPI's ``Form``
(and the python-multipart package it needs) is not used. Bounded: the app's body limit caps the
bytes, :data:`MAX_FIELDS` the fields, and :func:`field` each value's length.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, HTTPException, Request

MAX_FIELDS = 20


async def form_data(request: Request) -> dict[str, str]:
    """The posted fields (the first value of each name); 415 for any other body type, 422 for
    more than :data:`MAX_FIELDS` fields."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(415, "a dashboard form posts application/x-www-form-urlencoded")
    text = (await request.body()).decode("utf-8", "replace")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise HTTPException(422, f"a form has at most {MAX_FIELDS} fields") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def field(form: dict[str, str], name: str, max_chars: int) -> str:
    """Field ``name`` ('' when absent); 422 naming it when longer than ``max_chars``."""
    value = form.get(name, "")
    if len(value) > max_chars:
        raise HTTPException(422, f"{name}: longer than {max_chars} characters")
    return value


FormDep = Annotated[dict[str, str], Depends(form_data)]
