"""Re-cuts of partitioned cards (issue 53): the layout an admin asked a card on an agent node to
be cut into (or the scheduling cycle asked, for a job), until its agent reports it cut so or that
its vendor tool failed, and the events of each re-cut. A row in ``card_layouts`` is the wanted
layout the node's heartbeat replies carry, and the job it was asked for: a restarted plane knows
which job waits for which re-cut, so it neither asks again nor forgets the job;
``card_events`` keeps what happened (asked, applied, failed), for ``GET .../layout``;
``card_rests`` the failed re-cuts in a row of each card and its rest (``recut_backoff.py``), a
table of its own because a failure drops the card's wanted layout while its rest goes on, and a
restarted plane must not try the card again before the rest ends. Kept apart from ``nodes``: a
registration rewrites the node's row, and a wanted layout must outlive it."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, Integer, String, Table, Text

from xpupool.server.storage.meta import metadata

card_layouts = Table(
    "card_layouts",
    metadata,
    Column("node", String(63), primary_key=True),
    Column("card", String(200), primary_key=True),  # the card's UUID (partition_of)
    Column("layout", JSON, nullable=False),  # ["3g.40gb@0", ...]: read_layout's words
    Column("why", Text, nullable=False),
    Column("asked_at", Float, nullable=False),
    Column("cordoned", JSON, nullable=False),  # [uuid]: the instances it cordoned, lifted after
    Column("job", Integer, nullable=True),  # the job the cycle asked it for; null: the admin
)

card_events = Table(
    "card_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("node", String(63), nullable=False, index=True),
    Column("card", String(200), nullable=False),
    Column("at", Float, nullable=False),
    Column("event", String(16), nullable=False),  # asked | applied | failed
    Column("detail", Text, nullable=False),
)

card_rests = Table(
    "card_rests",
    metadata,
    Column("node", String(63), primary_key=True),
    Column("card", String(200), primary_key=True),  # the card's UUID (partition_of)
    Column("failures", Integer, nullable=False),  # failed re-cuts in a row
    Column("resting_until", Float, nullable=False),  # Unix time: no re-cut proposed before
    Column("reason", Text, nullable=False),  # the vendor tool's words on the last failure
)
