"""Where a run's output starts in a replica's log: the server appends every run of a replica
(each attempt, and a replica number an elastic job uses again) to one log file, and records beside
it (``<log>.attempt``: ``ATTEMPT OFFSET``) where the current run's bytes start, so that the
agent's offsets, counted from 0 for each run, are read against the right run
(``agent_reports.append_log``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane
    from xpupool.server.plane.records import HeldJob

__all__ = ["attempt_header", "attempt_start_path", "open_replica_log", "used_in_run"]


def attempt_start_path(log: Path) -> Path:
    """Beside a replica's log: ``ATTEMPT OFFSET``, where the current attempt's bytes start."""
    return log.with_name(f"{log.name}.attempt")


def open_replica_log(
    plane: ControlPlane, job: HeldJob, replica: int, attempt: int, header: bytes
) -> None:
    """Start run ``attempt``'s part of ``replica``'s log with ``header`` and record where its
    bytes start beside the log. Under ``plane.file_writes()``."""
    start = plane.logs.start(job.id, replica, job.tenant, header)
    attempt_start_path(plane.log_path(job.id, replica)).write_text(f"{attempt} {start}\n")


def attempt_header(attempt: int) -> bytes:
    """The line a replica's log has before the output of the job's ``attempt``-th run."""
    return f"[xpupool: attempt {attempt}]\n".encode()


def used_in_run(plane: ControlPlane, job: HeldJob, replica: int, attempt: int) -> bool:
    """Whether ``replica`` of ``job`` ran in run ``attempt`` already (its log's start is
    recorded for that run): an elastic job's grown replica never takes such a number again in
    the run, so no agent or log takes a new replica for an old one."""
    try:
        text = attempt_start_path(plane.log_path(job.id, replica)).read_text().split()
    except OSError:
        return False
    return bool(text) and text[0] == str(attempt)
