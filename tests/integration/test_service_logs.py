"""``xpupool logs`` of several jobs (client/log_follow.py) on real jobs of a real ``xpupool up``
with its in-process agent: every line is prefixed with its job's name and whole, a line a job
writes in two pieces included, and following ends when the jobs end.

A service's replicas are looked up in ``GET /v1/services/NAME``; until the service controller
serves that route, a plain HTTP server on 127.0.0.1 answers it in the view's shape (``replicas:
[{job_id, ...}]``) and hands every other request to the real server, so the replicas' logs are
real. It changes its answer as a controller would: a replica restarted as a new job, then the
service deleted (404). The logs keep their last MiB (``--log-cap 1Mi``): a reader that comes
late is told of the bytes rotated away, and reads nothing twice."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until
from test_agent_e2e import CLI
from test_job_secrets import CLUSTER, _ended

from xpupool.client._config import ClientConfig
from xpupool.client._http import Client
from xpupool.client.log_follow import follow_jobs, service_jobs

# a line in two pieces a second apart, and a last line with no newline
PIECES = "printf 'a1 '; sleep 1; echo end-a; echo a2"
LINES = "for i in 1 2 3; do echo b$i; sleep 0.3; done; printf b-last"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("logs") / "data"
    args = ("--heartbeat", "0.2", "--log-cap", "1Mi")  # logs keep their last MiB
    with ServerProc(data, cluster=CLUSTER, agent=True, extra_args=args) as s:
        yield s


@pytest.fixture(scope="module")
def lab(srv: ServerProc) -> Iterator[httpx.Client]:
    user = srv.tenant_client("lab")
    yield user
    user.close()


def token_of(user: httpx.Client) -> str:
    return user.headers["Authorization"].removeprefix("Bearer ")


def submit(user: httpx.Client, name: str, script: str) -> int:
    body = {"name": name, "command": ["/bin/sh", "-c", script], "spec": "cpu=100m"}
    r = user.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def lines_of(out: bytes) -> list[str]:
    return out.decode().splitlines()


def test_two_jobs_are_followed_to_their_end_whole_lines_prefixed(
    srv: ServerProc, lab: httpx.Client
) -> None:
    a = submit(lab, "chat-1", PIECES)
    b = submit(lab, "chat-2", LINES)
    out: list[bytes] = []
    with Client(ClientConfig(srv.url, token_of(lab), "XPUPOOL_TOKEN")) as client:
        jobs = [(a, "chat-1"), (b, "chat-2")]
        follow_jobs(client, lambda: jobs, out.append, follow=True, interval_s=0.2)
    for job_id in (a, b):
        assert _ended(lab, job_id), lab.get(f"/v1/jobs/{job_id}").json()
    text = b"".join(out)
    lines = lines_of(text)
    assert all(line.startswith(("[chat-1] ", "[chat-2] ")) for line in lines), lines
    assert [x for x in lines if x.startswith("[chat-1]")][-2:] == [
        "[chat-1] a1 end-a",
        "[chat-1] a2",
    ], lines
    mine = [x for x in lines if x.startswith("[chat-2]")]
    assert mine[-4:] == ["[chat-2] b1", "[chat-2] b2", "[chat-2] b3", "[chat-2] b-last"], lines
    assert all(chunk.endswith(b"\n") for chunk in out), out  # whole lines only, each write


class _Stub(BaseHTTPRequestHandler):
    """``GET /v1/services/chat`` in the service view's shape; anything else to the server."""

    server: _StubServer

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/v1/services/chat":
            replicas = self.server.replicas
            if replicas is None:
                self._answer(404, {"field": None, "value": None, "reason": "no such service"})
            else:
                self._answer(200, {"name": "chat", "replicas": replicas})
            return
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        try:
            auth = self.headers.get("Authorization", "")
            conn.request("GET", self.path, headers={"Authorization": auth})
            r = conn.getresponse()
            body = r.read()
            self.send_response(r.status)
            self.send_header("Content-Type", r.getheader("Content-Type") or "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            conn.close()

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


class _StubServer(ThreadingHTTPServer):
    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Stub)
        self.upstream_port = upstream_port
        self.replicas: list[dict[str, Any]] | None = []


def replica(job_id: int, n: int) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "generation": 1,
        "state": "running",
        "ready": True,
        "draining": False,
        "node": "n",
        "host": "127.0.0.1",
        "port": 8000 + n,
    }


@pytest.fixture
def stub(srv: ServerProc) -> Iterator[_StubServer]:
    server = _StubServer(srv.port)
    thread = threading.Thread(target=server.serve_forever, name="service-stub", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_service_is_followed_across_a_restarted_replica(
    srv: ServerProc, lab: httpx.Client, stub: _StubServer
) -> None:
    other = srv.tenant_client("other")
    try:
        theirs = submit(other, "secret-1", "echo not-yours")
    finally:
        other.close()
    first = submit(lab, "chat-1", "echo first-run; sleep 0.5; echo first-end")
    stub.replicas = [replica(first, 1), replica(theirs, 2)]  # another tenant's: not shown
    out: list[bytes] = []
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    with Client(ClientConfig(url, token_of(lab), "XPUPOOL_TOKEN")) as client:
        jobs = service_jobs(client, "chat")
        runner = threading.Thread(
            target=lambda: follow_jobs(
                client, jobs, out.append, follow=True, interval_s=0.2, refresh_s=0.2,
                more_may_come=True,
            ),
            name="follower",
        )  # fmt: skip
        runner.start()
        try:
            until(lambda: b"[chat-1] first-end\n" in b"".join(out), "the first replica's log")
            again = submit(lab, "chat-1", "echo second-run; sleep 0.5; echo second-end")
            stub.replicas = [replica(again, 1)]  # the replica restarted as a new job
            until(lambda: b"[chat-1] second-end\n" in b"".join(out), "the new job's log")
            assert runner.is_alive()  # a service is followed until it is gone
        finally:
            stub.replicas = None  # deleted: following ends
            runner.join(30)
    assert not runner.is_alive()
    lines = lines_of(b"".join(out))
    assert [x for x in lines if "-run" in x or "-end" in x] == [
        "[chat-1] first-run",
        "[chat-1] first-end",
        "[chat-1] second-run",
        "[chat-1] second-end",
    ], lines
    assert not any("not-yours" in x for x in lines), lines


def test_the_cli_shows_a_service_by_name(
    srv: ServerProc, lab: httpx.Client, stub: _StubServer
) -> None:
    job_id = submit(lab, "chat-3", "echo from-cli")
    until(lambda: _ended(lab, job_id), f"job {job_id}")
    stub.replicas = [replica(job_id, 3)]
    env = {
        **os.environ,
        "XPUPOOL_URL": f"http://127.0.0.1:{stub.server_address[1]}",
        "XPUPOOL_TOKEN": token_of(lab),
    }
    done = subprocess.run(
        [*CLI, "logs", "chat"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert b"[chat-3] from-cli\n" in done.stdout, done.stdout
    stub.replicas = None
    gone = subprocess.run(
        [*CLI, "logs", "chat"], env=env, capture_output=True, timeout=60, check=False
    )
    assert gone.returncode != 0 and b"no such service" in gone.stderr, gone


def test_a_job_id_is_still_one_job(srv: ServerProc, lab: httpx.Client, tmp_path: Path) -> None:
    job_id = submit(lab, "plain", "echo plain-job")
    until(lambda: _ended(lab, job_id), f"job {job_id}")
    env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token_of(lab)}
    done = subprocess.run(
        [*CLI, "logs", str(job_id)], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.endswith(b"plain-job\n"), done
    assert b"[" not in done.stdout  # unprefixed, as before


def test_a_late_reader_is_told_of_the_rotated_bytes_and_reads_nothing_twice(
    srv: ServerProc, lab: httpx.Client
) -> None:
    job_id = submit(lab, "chatty", "seq 1 400000")  # 2.7 MB: more than twice the cap
    until(lambda: _ended(lab, job_id), f"job {job_id}", 60)
    out: list[bytes] = []
    with Client(ClientConfig(srv.url, token_of(lab), "XPUPOOL_TOKEN")) as client:
        follow_jobs(client, lambda: [(job_id, "chatty")], out.append, follow=True)
    lines = lines_of(b"".join(out))
    assert all(x.startswith("[chatty] ") for x in lines), lines[:3]
    # told first, by the server's answer (its copy rotated them away before they were read) or
    # by the line its copy holds where the agent's copy rotated some away before it sent them;
    # such a line may come anywhere later too, where the agent fell behind the job
    notes = [i for i, x in enumerate(lines) if "rotated away" in x]
    assert notes and notes[0] == 0, lines[:3]
    assert all("rotated away on the node" in lines[i] for i in notes[1:]), [lines[i] for i in notes]
    seen: list[int] = []
    for start, end in zip(notes, [*notes[1:], len(lines) + 1], strict=True):
        # the line after a note may be a line's end, the one before an agent's note its start
        part = [int(x[9:]) for x in lines[start + 2 : end - 1]]
        if not part:  # two notes a line or two apart
            continue
        assert part == list(range(part[0], part[0] + len(part))), "a line twice, or one missing"
        assert not seen or part[0] > seen[-1], "a line read twice"
        seen += part
    assert seen[-1] == 400_000
    assert 0 < len(b"".join(out)) < (1 << 20) + 20 * len(lines)

    env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token_of(lab)}
    done = subprocess.run(
        [*CLI, "logs", str(job_id)], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.endswith(b"\n399999\n400000\n"), done.stderr
    told = b"rotated away before they were read" in done.stderr
    assert told or b"rotated away on the node" in done.stdout[:200], (
        done.stdout[:200],
        done.stderr,
    )
