"""``GET /v1/throughput``: what the plane has measured of how fast each job type of a tenant runs
on each card model (issue 55; ``server/throughput_knowledge.py`` says how figures are learned)."""

from __future__ import annotations

from pydantic import Field

from xpupool.server.schemas.base import Lenient


class MeasuredSpeed(Lenient):
    """One stored figure: a windowed mean of the rates the tenant's runs of ``kind`` reported on
    whole cards of ``model``."""

    tenant: str = Field(description="Whose jobs reported it.")
    kind: str = Field(description="The job type (a job's kind=, else its image, else its model).")
    model: str = Field(description="The card model, upper-case.")
    rate: float = Field(description="Per card, per second, in the kind's own unit (steps, tokens).")
    runs: int = Field(description="Runs the figure comes from.")
    reports: int = Field(description="Reports the figure comes from.")
    updated_at: float = Field(description="Unix time of the last report counted.")
