"""``xpupool logs SERVICE``: the logs of several jobs at once, each line prefixed with its job's
name (``[chat-2] ...``), as ``kubectl logs -l`` and ``docker compose logs`` show several
containers.

Each job's log is read from its own offset (``GET /v1/jobs/ID/logs``), and only whole lines are
printed: the bytes after a job's last newline wait for the rest of their line, so a line is never
split by another job's. A job's unfinished last line is printed (with a newline) once the job has
ended. The set of jobs is asked for again every ``refresh_s`` (a service's replicas:
``GET /v1/services/NAME``), so a replica that restarts as a new job is followed too; a job that
left the set is still read to its end. A log that rotated away bytes before they were read says
so in a line of its own, in the stream of that job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xpupool.client._errors import ApiError
from xpupool.client._http import Client
from xpupool.client._views import FINAL_JOB_STATES


def skipped_note(n_bytes: int) -> str:
    """What a reader is told of bytes the log rotated away before they were read (the log keeps
    its last ``--log-cap`` bytes: ``xpupool/log_rotation.py``)."""
    return f"[xpupool: {n_bytes} bytes of this log were rotated away before they were read]"


Jobs = Callable[[], Sequence[tuple[int, str]]]
"""The jobs to follow now, as (job id, label); raises ApiError when there are none any more
(a service deleted)."""


@dataclass(slots=True)
class _Stream:
    """One job's log as read so far: the next offset, and a line not yet whole."""

    job_id: int
    prefix: bytes
    offset: int = 0
    partial: bytes = b""
    done: bool = False


class LogFollower:
    """Reads the logs of several jobs and writes their whole lines, each prefixed; ``write``
    takes bytes (stdout's binary stream)."""

    def __init__(self, client: Client, write: Callable[[bytes], None]) -> None:
        self._client = client
        self._write = write
        self._streams: dict[int, _Stream] = {}

    def add(self, job_id: int, label: str) -> None:
        """Follow ``job_id`` from its log's start (again adding a followed job changes nothing)."""
        if job_id not in self._streams:
            self._streams[job_id] = _Stream(job_id, f"[{label}] ".encode())

    @property
    def following(self) -> bool:
        """Whether some followed job has not ended (or was never seen to)."""
        return any(not s.done for s in self._streams.values())

    def read_once(self) -> bool:
        """One read of every unfinished job's log; whether any bytes came."""
        got = False
        for stream in self._streams.values():
            if not stream.done:
                got |= self._read(stream)
        return got

    def settle(self, *, final: bool) -> None:
        """After a round with no new bytes: mark the jobs that have ended as done, each after one
        last read (bytes written between the read and the state check), their unfinished line
        printed. ``final``: every job is taken as ended (``logs`` without ``--follow``)."""
        for stream in self._streams.values():
            if stream.done:
                continue
            if not final:
                try:
                    state = self._client.job(stream.job_id).state
                except ApiError as exc:
                    if exc.status != 404:  # forgotten by retention: nothing more will come
                        raise
                    state = "forgotten"
                if state not in FINAL_JOB_STATES and state != "forgotten":
                    continue
            while self._read(stream):
                pass
            if stream.partial:
                self._write(stream.prefix + stream.partial + b"\n")
                stream.partial = b""
            stream.done = True

    def _read(self, stream: _Stream) -> bool:
        try:
            skipped, chunk = self._client.logs(stream.job_id, offset=stream.offset)
        except ApiError as exc:
            if exc.status != 404:
                raise
            stream.done = True  # the job is gone (retention): nothing more to read
            return False
        if skipped:  # rotated away before it was read: the line in hand ends there
            ended = [stream.partial] if stream.partial else []
            note = [*ended, skipped_note(skipped).encode()]
            self._write(b"".join(stream.prefix + line + b"\n" for line in note))
            stream.partial = b""
        stream.offset += skipped + len(chunk)
        if not chunk:
            return bool(skipped)
        data = stream.partial + chunk
        cut = data.rfind(b"\n") + 1
        stream.partial = data[cut:]
        if cut:
            lines = data[:cut].splitlines(keepends=True)
            self._write(b"".join(stream.prefix + line for line in lines))
        return True


def follow_jobs(
    client: Client,
    jobs: Jobs,
    write: Callable[[bytes], None],
    *,
    follow: bool,
    interval_s: float = 1.0,
    refresh_s: float = 5.0,
    more_may_come: bool = False,
) -> None:
    """Print the logs of ``jobs()`` prefixed, until each has ended (``follow``) or once (not).

    ``more_may_come``: the set may grow while all its jobs have ended (a service whose replicas
    restart), so following goes on until ``jobs()`` raises :class:`ApiError` (the service is
    gone); the jobs already followed are then read to their end. The first ``jobs()`` raising
    is raised (no such service)."""
    follower = LogFollower(client, write)
    asked: float | None = None
    gone = False
    while True:
        if not gone and (asked is None or time.monotonic() - asked >= refresh_s):
            first = asked is None
            asked = time.monotonic()
            try:
                for job_id, label in jobs():
                    follower.add(job_id, label)
            except ApiError as exc:
                if exc.status != 404 or first:  # first: no such service, said as the server says
                    raise
                gone = True
        if follower.read_once():
            continue  # one read per job a round: the set is asked again while logs pour in
        follower.settle(final=not follow)
        if not follow or (not follower.following and (gone or not more_may_come)):
            return
        time.sleep(interval_s)


def service_jobs(client: Client, name: str) -> Jobs:
    """The jobs of service ``name``'s replicas (``GET /v1/services/NAME``: ``replicas[].job_id``),
    labelled with each job's name (``chat-2``); a job's name is asked once."""
    names: dict[int, str] = {}

    def jobs() -> list[tuple[int, str]]:
        out = []
        for replica in client.service_replicas(name):
            job_id = replica.get("job_id")
            if not isinstance(job_id, int) or isinstance(job_id, bool):
                continue  # a replica not started as a job yet
            if job_id not in names:
                try:
                    names[job_id] = client.job(job_id).name or f"job-{job_id}"
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    continue
            out.append((job_id, names[job_id]))
        return out

    return jobs
