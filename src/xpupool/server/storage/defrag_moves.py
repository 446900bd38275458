"""Moves made to defragment or consolidate (issue 54 part 3): one row per running job the plane
moved, with the tenant and the work it lost, so that the disruption budget's windows (moves per
tenant per hour, GPU-hours lost per day) hold across a restart, and, for a defragmentation move,
the job it was moved for, so that a requeued moved job still lets that job go first
(``server/plane/defrag_moves.py``); a consolidation move (``consolidation_moves.py``) is made for
no job. Rows older than a day count in no window and are deleted as new moves are written."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table, text

from xpupool.server.storage.meta import metadata

defrag_moves = Table(
    "defrag_moves",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False, index=True),  # Unix time of the move
    Column("job_id", Integer, nullable=False),  # the job moved
    Column("for_job", Integer, nullable=False),  # the pending job it was moved for; 0: none
    Column("tenant", String(63), nullable=False),  # the moved job's (the hourly budget's key)
    Column("lost_card_s", Float, nullable=False),  # card-seconds since its last checkpoint
    # 'defrag' or 'consolidate'; quoted: add_missing_columns writes the default as it is given
    Column("kind", String(11), nullable=False, server_default=text("'defrag'")),
)
