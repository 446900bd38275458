"""What an elastic job's replica is told of its size (``agent/elastic_size.py``): the variables it
starts with, the size file written whole, and with a real supervisor and process, the file
rewritten and the signal sent when the server's world changes (never for the first write, which
says what the environment said)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from agent_work import poll_until, settings, started, work

from xpupool.agent.elastic_size import SIZE_FILE_NAME, size_env, write_size_file
from xpupool.agent.runner import Runner
from xpupool.server.schemas.agent_protocol import ElasticMember, ElasticWorld

STANDIN = Path(__file__).parents[2] / "integration" / "elastic_standin.py"


def world(size: int, rank: int = 0) -> ElasticWorld:
    members = [ElasticMember(rank=i, replica=i, address="127.0.0.1") for i in range(size)]
    return ElasticWorld(replicas=size, rank=rank, min_replicas=1, max_replicas=4, members=members)


def test_an_elastic_replica_starts_with_its_size_rank_and_file(tmp_path: Path) -> None:
    assert size_env(world(3, rank=2), tmp_path) == {
        "XPUPOOL_REPLICAS": "3",
        "XPUPOOL_RANK": "2",
        "XPUPOOL_SIZE_FILE": str(tmp_path / SIZE_FILE_NAME),
    }
    assert size_env(None, tmp_path) == {}  # a fixed-size job gets none of them


def test_the_size_file_is_written_whole_and_not_where_there_is_no_directory(
    tmp_path: Path,
) -> None:
    assert write_size_file(tmp_path, world(2, rank=1))
    written = json.loads((tmp_path / SIZE_FILE_NAME).read_text())
    assert written["replicas"] == 2 and written["rank"] == 1 and "signal" not in written
    assert [m["replica"] for m in written["members"]] == [0, 1]
    assert os.listdir(tmp_path) == [SIZE_FILE_NAME]  # no temporary left
    assert not write_size_file(tmp_path / "not-made-yet", world(2))


def test_the_size_file_is_readable_by_the_job_whatever_the_agents_umask(tmp_path: Path) -> None:
    """A root agent (umask 077) writes it into the working directory of a job running as its
    own uid: the job read it as 'permission denied' and failed (seen on a real server)."""
    before = os.umask(0o077)
    try:
        assert write_size_file(tmp_path, world(1))
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / SIZE_FILE_NAME).stat().st_mode) == 0o644


@pytest.mark.slow
def test_a_running_replica_gets_the_file_and_a_signal_when_its_size_changes(
    tmp_path: Path,
) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 60.0, grace_s=0.5)
    given = work([sys.executable, str(STANDIN)]).model_copy(update={"elastic": world(1)})
    rep = started(runner.start(given), runner)
    assert rep.spec is not None

    def log() -> str:
        return rep.log_path.read_text() if rep.log_path.exists() else ""

    try:
        poll_until(lambda: "start size 1 rank 0" in log(), runner)
        runner.start(given)  # the same world again (the next heartbeat): the file, no signal
        size_file = rep.spec.workdir / SIZE_FILE_NAME
        assert json.loads(size_file.read_text())["replicas"] == 1
        runner.start(given.model_copy(update={"elastic": world(2)}))  # it grew
        assert json.loads(size_file.read_text())["replicas"] == 2
        poll_until(lambda: "signal size 2 rank 0 members 0,1" in log(), runner)
        assert "signal size 1" not in log()
    finally:
        runner.shutdown(timeout_s=5)
