"""Online defragmentation's dry run (``GET /v1/defrag/plan``, ``xpupool defrag --dry-run``): for
each pending job that moves would let in now, the moves and what they would free
(docs/defragmentation.md)."""

from __future__ import annotations

from pydantic import Field

from xpupool.server.schemas.base import Lenient


class Cards(Lenient):
    """Cards of one node."""

    node: str
    cards: list[str] = Field(description="The cards' UUIDs.")


class DefragMove(Lenient):
    """A running job the plan moves: checkpointed, stopped and requeued, placed again elsewhere."""

    job: int
    tenant: str
    holds: list[Cards] = Field(description="The cards it holds now, per node: what it leaves.")
    gpu_hours_lost: float = Field(
        description="GPU-hours the move would lose: the cards it holds times the time since its "
        "last checkpoint (its run time when it reported none)."
    )


class DefragPlanItem(Lenient):
    """The moves that would let pending job ``job`` in now, fewest first, then least lost."""

    job: int
    tenant: str
    moves: list[DefragMove]
    frees: list[Cards] = Field(description="Where the pending job would then be placed.")
    gpu_hours_lost: float = Field(description="What its moves would lose in all, in GPU-hours.")


class DefragPlanView(Lenient):
    """What defragmentation would do now; nothing is changed by asking."""

    enabled: bool = Field(
        description="Whether the server moves work (xpupool up --defrag); when false, the plans "
        "are what it would do with --defrag's default budget."
    )
    plans: list[DefragPlanItem] = Field(
        description="One per pending job moves would let in now, in the scheduler's order; "
        "each is planned against the pool as it is (carrying one out changes the others)."
    )
