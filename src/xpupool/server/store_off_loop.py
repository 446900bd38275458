"""Store calls made from the event loop: on the loop for SQLite, on a thread for PostgreSQL.

The API's coroutines (a submission, the token of a request not seen yet, an agent's log upload,
the rate limiter's look-up of such a token) run on the event loop that serves every request and
runs the scheduling passes. A store that is a file of this host (SQLite) answers in microseconds
to a few ms, and a hop to a thread and back cost a submission more than its statement did (issue
25); a store over the network (PostgreSQL) answers in round trips, and behind a partition that
drops packets not at all: on the loop, one such call stopped every request, ``/healthz`` too
(issue 50). So a call that may wait for the store goes through :func:`on_store`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import OperationalError

from xpupool.server.error_answers import ErrorAnswer, error_body
from xpupool.server.plane import ControlPlane

P = ParamSpec("P")
T = TypeVar("T")


async def on_store(plane: ControlPlane, call: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
    """``call(*args, **kw)``, which may wait for ``plane``'s store: here when the store is local
    (``ControlPlane.store_is_local``), else on a thread while the loop serves on. Once the store
    counts as stalled, the call's new connection or wait for the plane's lock is refused at once
    (503, ``plane/store_stall.py``)."""
    if plane.store_is_local:
        return call(*args, **kw)
    return await asyncio.to_thread(call, *args, **kw)


def unreachable_answer(exc: OperationalError) -> ErrorAnswer:
    """The answer to a read the store did not answer (a connection that timed out, a lost one):
    503, as a write that fails answers (``ControlPlane.write``), not a 500 as if it were a bug."""
    first = str(exc.orig or exc).splitlines()[0] if str(exc.orig or exc) else "no answer"
    return ErrorAnswer(503, error_body(None, None, f"the store cannot be reached: {first}"[:300]))
