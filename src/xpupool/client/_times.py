"""Times the admin types: a duration (``90s``, ``30m``, ``12h``, ``7d``, ``2w``) or an ISO 8601
time (``2026-12-31T00:00:00Z``; without a zone it is UTC). ``token issue --expires`` sends a
duration as is, so the server's clock decides when it ends; ``audit --since`` counts back from
now."""

from __future__ import annotations

from datetime import UTC, datetime

from xpupool.model.errors import RequestError
from xpupool.model.stopping import duration_s

__all__ = ["HINT", "ahead", "duration_s", "expiry", "since", "timestamp"]

HINT = "use a duration such as 30m, 12h or 7d, or an ISO time such as 2026-12-31T00:00:00Z"


def timestamp(text: str) -> float | None:
    """Unix time of an ISO 8601 time; None if ``text`` is not one."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def expiry(option: str, text: str) -> dict[str, float]:
    """The token body's expiry fields for ``--expires TEXT``."""
    seconds = duration_s(text)
    if seconds is not None:
        if seconds <= 0:
            raise RequestError(option, text, "must be more than 0")
        return {"expires_in_s": seconds}
    at = timestamp(text)
    if at is None:
        raise RequestError(option, text, HINT)
    return {"expires_at": at}


def since(option: str, text: str, now: float) -> float:
    """Unix time for ``--since TEXT``: a duration back from ``now``, or a time."""
    seconds = duration_s(text)
    if seconds is not None:
        return now - seconds
    at = timestamp(text)
    if at is None:
        raise RequestError(option, text, HINT)
    return at


def ahead(option: str, text: str, now: float) -> float:
    """Unix time for ``--from TEXT`` and the like: a duration on from ``now``, or a time."""
    seconds = duration_s(text)
    if seconds is not None:
        return now + seconds
    at = timestamp(text)
    if at is None:
        raise RequestError(option, text, HINT.replace("such as 30m", "from now such as 30m"))
    return at
