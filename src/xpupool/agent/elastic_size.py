"""What a replica of an elastic job (``replicas=MIN..MAX``, issue 54) is told of its job's size.

At start its environment says it: ``XPUPOOL_REPLICAS`` (the replicas now), ``XPUPOOL_RANK`` (its
rank, 0..N-1 in replica order) and ``XPUPOOL_SIZE_FILE``, a JSON file in its working directory
that the agent writes once the replica runs and rewrites, whole (a temporary name renamed over
it: a reader sees the old content or the new, never a part), whenever the server says the size
or the ranks changed; after each change the replica's supervisor sends it the world's signal
(``SIGUSR1``). The file holds the server's :class:`ElasticWorld` (``replicas``, ``rank``,
``min_replicas``, ``max_replicas`` and ``members``: rank, replica and address of each, in rank
order). The server re-sends a running replica's work at every heartbeat, so a change reaches the
file within a heartbeat, and one missed (the working directory not made yet) is written at the
next. docs/jobs.md ("Elastic jobs") is the contract for jobs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path

from xpupool.server.schemas.agent_protocol import ElasticWorld

log = logging.getLogger("xpupool.agent")

SIZE_FILE_NAME = "xpupool-size.json"
REPLICAS_ENV = "XPUPOOL_REPLICAS"
RANK_ENV = "XPUPOOL_RANK"
SIZE_FILE_ENV = "XPUPOOL_SIZE_FILE"


def size_env(world: ElasticWorld | None, workdir: Path) -> dict[str, str]:
    """The variables an elastic replica starts with (none for a fixed-size job)."""
    if world is None:
        return {}
    return {
        REPLICAS_ENV: str(world.replicas),
        RANK_ENV: str(world.rank),
        SIZE_FILE_ENV: str(workdir / SIZE_FILE_NAME),
    }


def size_text(world: ElasticWorld) -> bytes:
    """The size file's content: the world without the signal's name, one JSON object."""
    return (world.model_dump_json(exclude={"signal"}) + "\n").encode()


def write_size_file(workdir: Path, world: ElasticWorld) -> bool:
    """Write ``world`` as the size file in ``workdir``, whole; False when it cannot be written
    (the directory is not made yet, or is gone). The temporary name is new each time and opened
    without following links: the directory is the job's, and nothing it plants there is written
    through."""
    target = workdir / SIZE_FILE_NAME
    tmp = workdir / f".{SIZE_FILE_NAME}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o644)
    except OSError:
        return False
    try:
        try:
            os.fchmod(fd, 0o644)  # the job runs as its own uid; the agent's umask is 077
            view = memoryview(size_text(world))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        log.warning("size file %s not written: %s", target, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True
