"""Moves made to defragment (issue 54 part 3): one row per running job the plane moved, with the
tenant and the work it lost, so that the disruption budget's windows (moves per tenant per hour,
GPU-hours lost per day) hold across a restart, and the job it was moved for, so that a requeued
moved job still lets that job go first (``server/plane/defrag_moves.py``). Rows older than a day
count in no window and are deleted as new moves are written."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table

from xpupool.server.storage.meta import metadata

defrag_moves = Table(
    "defrag_moves",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False, index=True),  # Unix time of the move
    Column("job_id", Integer, nullable=False),  # the job moved
    Column("for_job", Integer, nullable=False),  # the pending job it was moved for
    Column("tenant", String(63), nullable=False),  # the moved job's (the hourly budget's key)
    Column("lost_card_s", Float, nullable=False),  # card-seconds since its last checkpoint
)
