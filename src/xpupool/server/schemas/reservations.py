"""Reservations (``/v1/reservations``): cards the admin holds for a tenant, or one of its jobs by
name, in a time window; lent to preemptible work until it begins (docs/reservations.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from xpupool.server.schemas.base import Lenient, Name, Strict

MAX_WINDOW_S = 366 * 86_400
Phase = Literal["ahead", "open", "ended"]


class ReservationIn(Strict):
    """A reservation as the admin makes it."""

    name: Name = Field(description="Its name: jobs run in it with reservation=NAME.")
    tenant: Name = Field(description="The tenant whose jobs may run in it.")
    job: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Only the tenant's job of this name may run in it; null = any of its jobs.",
    )
    cards: str = Field(
        max_length=100,
        description="What it holds: MODELxCOUNT whole cards on one node ('A100x4'), or a count "
        "of cards of any model ('4').",
    )
    site: Name | None = Field(None, description="The site its cards are in; null = any.")
    start_at: float = Field(ge=0, description="Unix time its window begins; not in the past.")
    end_at: float = Field(
        ge=0, description=f"Unix time its window ends: after start_at, {MAX_WINDOW_S} s at most."
    )


class ReservationView(Lenient):
    """A reservation as stored, with the cards it holds and where its window stands."""

    name: str
    tenant: str
    job: str | None = None
    cards: str
    site: str | None = None
    start_at: float
    end_at: float
    devices: list[str] = Field(description="The UUIDs of the cards it holds.")
    phase: Phase = Field(
        description="ahead: its cards are lent; open: held for its jobs; ended: anyone's."
    )
    created_at: float
