"""A replica's log on the server keeps its last ``--log-cap`` bytes (issue 47): a replica that
writes past the cap keeps being logged and its last bytes are readable; offsets stay those of the
whole log, so a reader at an offset rotated away gets the oldest bytes kept and is told how many
it missed (``X-Xpupool-Log-Skipped``), and a follower across the rotation reads nothing twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, Server, heartbeat, node, open_server, submit, tenant

from xpupool.server.app import create_app

KIB = 1 << 10
CAP = 64 * KIB
SKIPPED = "X-Xpupool-Log-Skipped"


@pytest.fixture
def small(tmp_path: Path, clock: FakeClock) -> Iterator[Server]:
    """A plane whose replicas' logs keep 64 KiB (``xpupool up --log-cap``)."""
    plane, token = open_server(tmp_path, clock, max_log_bytes=CAP)
    assert token is not None
    with TestClient(create_app(plane, background=False)) as client:
        yield Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    plane.db.dispose()


def running(srv: Server) -> tuple[int, str]:
    node(srv, "n1", count=1)
    token = tenant(srv, "a")
    job_id = int(submit(srv, token, "A100")["id"])
    srv.schedule()
    heartbeat(srv, "n1")
    return job_id, token


class Uploads:
    """The agent's side: the run's output, shipped with its offsets."""

    def __init__(self, srv: Server, job_id: int) -> None:
        self.srv, self.job_id, self.sent = srv, job_id, 0

    def send(self, data: bytes) -> None:
        url = f"/v1/agent/nodes/n1/jobs/{self.job_id}/replicas/0/logs"
        params = {"offset": self.sent, "attempt": 1}
        r = self.srv.client.post(url, content=data, params=params, headers=self.srv.admin)
        assert r.status_code == 204, r.text
        self.sent += len(data)


def lines(first: int, count: int) -> bytes:
    return b"".join(b"line-%06d\n" % i for i in range(first, first + count))  # 12 bytes each


def read(srv: Server, job_id: int, token: str, offset: int) -> tuple[int, bytes]:
    r = srv.client.get(f"/v1/jobs/{job_id}/logs", params={"offset": offset}, headers=srv.as_(token))
    assert r.status_code == 200, r.text
    return int(r.headers.get(SKIPPED, "0")), r.content


@pytest.mark.slow
def test_a_replica_writing_past_the_cap_keeps_writing_and_its_last_bytes_are_readable(
    small: Server,
) -> None:
    job_id, token = running(small)
    up = Uploads(small, job_id)
    for first in range(0, 40_000, 1000):  # 480 KB, 7.5 times the cap
        up.send(lines(first, 1000))
    up.send(b"the end\n")
    path = small.plane.log_path(job_id, 0)
    skipped, data = read(small, job_id, token, 0)
    assert data.endswith(lines(39_000, 1000) + b"the end\n"), data[-200:]
    assert skipped > 0 and skipped + len(data) == path.stat().st_size  # offsets of the whole
    assert len(data) <= CAP  # what is kept, all of it after the oldest byte kept
    assert path.stat().st_blocks * 512 <= CAP + 16 * KIB  # on disk too: the rest is dropped


@pytest.mark.slow
def test_a_follower_across_the_rotation_sees_no_duplicate_and_is_told_of_the_gap(
    small: Server,
) -> None:
    job_id, token = running(small)
    up = Uploads(small, job_id)
    offset, got, gaps, sent_lines = 0, b"", [], 0
    for round_ in range(12):
        batches = 10 if round_ % 4 == 3 else 1  # now and then, behind by more than the cap
        for _ in range(batches):
            up.send(lines(sent_lines, 1000))
            sent_lines += 1000
        skipped, data = read(small, job_id, token, offset)
        if skipped:
            gaps.append(skipped)
        offset += skipped + len(data)
        got += data
    assert len(gaps) == 3, gaps  # told each time it fell behind, and only then
    assert offset == small.plane.log_path(job_id, 0).stat().st_size
    numbers = [int(x[5:]) for x in got.split(b"\n") if x.startswith(b"line-") and len(x) == 11]
    assert numbers == sorted(set(numbers)), "a line read twice or out of order"
    assert got.endswith(lines(sent_lines - 1000, 1000))
    assert read(small, job_id, token, offset) == (0, b"")


@pytest.mark.slow
def test_a_job_limit_as_large_as_the_cap_does_not_cut_a_rotating_log(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The tenant's ``max_job_log_mib`` counts the bytes the logs keep: a one-replica job whose
    limit equals ``--log-cap`` (64 MiB both, by default) rotates for ever and is never cut."""
    plane, admin = open_server(tmp_path, clock, max_log_bytes=1 << 20)
    assert admin is not None
    with TestClient(create_app(plane, background=False)) as client:
        srv = Server(plane, client, admin, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
        job_id, token = running(srv)
        r = client.patch("/v1/tenants/a", json={"max_job_log_mib": 1}, headers=srv.admin)
        assert r.status_code == 200, r.text
        up = Uploads(srv, job_id)
        for first in range(0, 300_000, 20_000):  # 3.6 MB
            up.send(lines(first, 20_000))
        skipped, data = read(srv, job_id, token, 0)
        assert b"log cut" not in data and data.endswith(lines(280_000, 20_000))
        assert skipped + len(data) == up.sent
    plane.db.dispose()
