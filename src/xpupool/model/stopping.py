"""How a job asks to be stopped: its grace, its checkpoint signal and its minimum run time.

A preempted or cancelled job is stopped in a fixed order (docs/jobs.md, "Stopping well"): its
checkpoint signal first when it names one, then SIGTERM ``CHECKPOINT_LEAD_S`` later, then SIGKILL
once its grace has passed since SIGTERM. ``min_run_s`` keeps it from being preempted before it has
run that long (``engine/cycle/stop_cost.py``). The durations are written as people write them
(``30s``, ``10m``, ``2h``); one parser reads them here for the request and the command line.
``idle_stop`` (``5%/30m``) stops a job whose cards stayed under a utilisation for a time, as
dstack's ``utilization_policy`` does (docs/jobs.md, "Stopping well").
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from xpupool.model.errors import RequestError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_HINT = "use a duration such as 30s, 10m or 2h"

MAX_GRACE_S = 3600.0  # the most any job may ask; an operator may set a lower bound per server
MAX_MIN_RUN_S = 7 * 86400.0
MIN_IDLE_WINDOW_S = 60.0  # an idle window shorter than this would stop jobs still starting up
MAX_IDLE_WINDOW_S = 7 * 86400.0
IDLE_HINT = "use a utilisation under which the job counts as idle and for how long: 5%/30m"
CHECKPOINT_LEAD_S = 5.0  # between the checkpoint signal and SIGTERM when a job names one
# A job reports a checkpoint by writing or touching the file this variable names (in its own
# working directory): its agent sends the file's age with the replica's report.
CHECKPOINT_FILE_ENV = "XPUPOOL_CHECKPOINT_FILE"
CHECKPOINT_FILE_NAME = ".xpupool-checkpoint"
# Signals a job may take as its checkpoint signal: those a program may catch and that ask it
# nothing else (not KILL or STOP, which cannot be caught; not TERM, which is the stop itself).
CHECKPOINT_SIGNALS = ("USR1", "USR2", "HUP", "INT", "QUIT", "WINCH", "URG", "PWR")


def duration_s(text: str) -> float | None:
    """Seconds in ``text`` if it is a duration (``90s``, ``30m``, ``12h``, ``7d``, ``2w``); None
    if it is not one."""
    found = _DURATION.match(text)
    return None if found is None else float(found.group(1)) * _UNIT_S[found.group(2)]


def parse_duration(field: str, value: object, most_s: float) -> float:
    """A positive duration up to ``most_s`` seconds: text (``30s``) or a number of seconds."""
    if isinstance(value, bool):
        raise RequestError(field, value, DURATION_HINT)
    seconds = float(value) if isinstance(value, int | float) else duration_s(str(value))
    if seconds is None:
        raise RequestError(field, value, DURATION_HINT)
    if not 0 < seconds <= most_s:
        raise RequestError(field, value, f"must be more than 0 and at most {most_s:g} s")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact text of ``seconds`` (``600`` -> ``10m``)."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def parse_checkpoint_signal(field: str, value: object) -> str:
    """A signal name (``USR1``, ``SIGUSR1``, any case) from :data:`CHECKPOINT_SIGNALS`, as its
    short upper-case name."""
    text = str(value).strip().upper()
    name = text[3:] if text.startswith("SIG") else text
    if name not in CHECKPOINT_SIGNALS or not hasattr(signal, f"SIG{name}"):
        known = ", ".join(CHECKPOINT_SIGNALS)
        raise RequestError(
            field, value, f"not a signal a job may checkpoint on; use one of {known}"
        )
    return name


def signal_number(name: str) -> int:
    """The number of a signal :func:`parse_checkpoint_signal` accepted."""
    return int(getattr(signal, f"SIG{name}"))


@dataclass(frozen=True, slots=True)
class IdleStop:
    """Stop the job once every card it holds whole stayed under ``below_pct`` utilisation for
    ``for_s`` seconds (``5%/30m``)."""

    below_pct: float
    for_s: float

    def __post_init__(self) -> None:
        if not 0 < self.below_pct <= 100:
            raise RequestError(
                "idle_stop", self.text(), "the utilisation must be above 0 and at most 100%"
            )
        if not MIN_IDLE_WINDOW_S <= self.for_s <= MAX_IDLE_WINDOW_S:
            raise RequestError(
                "idle_stop",
                self.text(),
                f"the time must be at least {MIN_IDLE_WINDOW_S:g} s and at most 7 days",
            )

    def text(self) -> str:
        """``5%/30m``: what :func:`parse_idle_stop` reads."""
        return f"{self.below_pct:g}%/{format_duration(self.for_s)}"


def parse_idle_stop(field: str, value: object) -> IdleStop:
    """``5%/30m`` (a utilisation in percent, then a duration), or an :class:`IdleStop`."""
    if isinstance(value, IdleStop):
        return value
    text = str(value).strip()
    pct, slash, window = text.partition("/")
    seconds = duration_s(window) if slash else None
    try:
        below = float(pct.strip().removesuffix("%")) if pct.strip().endswith("%") else None
    except ValueError:
        below = None
    if below is None or seconds is None:
        raise RequestError(field, value, IDLE_HINT)
    try:
        return IdleStop(below, seconds)
    except RequestError as exc:
        raise RequestError(field, value, exc.reason) from None
