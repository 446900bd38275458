"""What every wire type is built on: the name rule, and the strict and lenient bases.

A request body (:class:`Strict`) forbids unknown fields, so a typo is a 422 naming the field; a
response or a peer's report (:class:`Lenient`) is read leniently, so a newer peer cannot break an
older one (STYLE.md section 4). :class:`Incoming` refuses values no process, store or encoder can
hold. Every other module of the package builds on these, the agent protocol included, so this one
imports nothing of the package.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from xpupool.server.wire_values import first_unsafe, readable

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[
    str,
    Field(
        pattern=NAME_PATTERN,
        max_length=63,
        description="Lower-case letters, digits, '.', '_' and '-'; 1 to 63 characters, "
        "starting and ending with a letter or digit.",
    ),
]


class Incoming(BaseModel):
    """What a peer sends: no NUL byte, lone surrogate, NaN or Infinity anywhere in any field
    (``wire_values.py`` says why). The error's ``ctx`` carries the path inside the field
    (``at``) and the offending value, so the API names ``command[1]``, not all of ``command``."""

    @field_validator("*", mode="before")
    @classmethod
    def _representable(cls, value: object) -> object:
        found = first_unsafe(value)
        if found is not None:
            at, bad, reason = found
            ctx = {"reason": reason, "at": at, "value": readable(bad)}  # pydantic encodes ctx
            raise PydanticCustomError("unsafe_value", "{reason}", ctx)
        return value


class Strict(Incoming):
    """A request body: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A response or a peer's report: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class LenientIn(Incoming):
    """A peer's report taken in (a heartbeat): unknown fields are ignored, values are checked."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(Lenient):
    """Every 4xx: what was wrong, where. ``field`` is a path such as ``request.devices.memory``."""

    field: str | None = Field(None, description="Path of the offending field; null if none.")
    value: object = Field(None, description="The value that was rejected, as received.")
    reason: str = Field(description="Why it was rejected.")
