"""``xpupool up --http-workers N``: worker processes take the API's connections; a submission goes
to the plane on its channel, every other request through the plane's own HTTP server. Real
processes throughout: the plane, its workers, and clients over TCP.

What must hold: a client cannot tell the two servers apart, a worker that dies is replaced, the
workers go with the plane, and the plane listens only where its own user can reach.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import CLUSTER_MIXED, ServerProc, until

OK_JOB = {"spec": "nvidia:1 mem=4Gi", "command": ["true"]}
JSON = {"Content-Type": "application/json"}


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class Pool:
    """A server with a tenant ``t1``, its token, and an agent token."""

    def __init__(self, srv: ServerProc) -> None:
        self.srv = srv
        self.client = httpx.Client(base_url=srv.url, timeout=30)
        admin = srv.headers()
        self.client.post("/v1/tenants", json={"name": "t1"}, headers=admin).raise_for_status()
        self.client.post("/v1/tenants", json={"name": "t2"}, headers=admin).raise_for_status()
        r = self.client.post("/v1/tenants/t1/tokens", json={"name": "t"}, headers=admin)
        self.tenant_token = r.raise_for_status().json()["token"]
        r = self.client.post("/v1/tokens", json={"role": "agent"}, headers=admin)
        self.agent_token = r.raise_for_status().json()["token"]

    def token(self, who: str) -> str:
        return {
            "admin": self.srv.admin_token,
            "tenant": self.tenant_token,
            "agent": self.agent_token,
        }.get(who, who)


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pool, Pool]]:
    """The same pool served twice: by the plane alone, and behind one HTTP worker."""
    alone = ServerProc(tmp_path_factory.mktemp("alone") / "data", cluster=CLUSTER_MIXED)
    fronted = ServerProc(
        tmp_path_factory.mktemp("fronted") / "data",
        cluster=CLUSTER_MIXED,
        extra_args=("--http-workers", "1"),
    )
    with alone, fronted:
        yield Pool(alone), Pool(fronted)


def _comparable(body: Any) -> Any:
    """An answer without what differs between two pools: times and generated names."""
    if isinstance(body, dict):
        return {
            k: _comparable(v)
            for k, v in body.items()
            if k not in ("at", "first_at", "created_at", "updated_at", "id", "allocation_id")
        }
    if isinstance(body, list):
        return [_comparable(v) for v in body]
    return body


# (who, headers, body): the body as bytes, sent as it is
SUBMISSIONS: list[tuple[str, str, dict[str, str], bytes]] = [
    ("accepted", "tenant", JSON, json.dumps(OK_JOB).encode()),
    ("admin for a tenant", "admin", JSON, json.dumps({**OK_JOB, "tenant": "t1"}).encode()),
    ("admin without a tenant", "admin", JSON, json.dumps(OK_JOB).encode()),
    ("for another tenant", "tenant", JSON, json.dumps({**OK_JOB, "tenant": "t2"}).encode()),
    ("bad memory", "tenant", JSON, b'{"spec": "nvidia:1 mem=4Gx", "command": ["true"]}'),
    ("unknown field", "tenant", JSON, b'{"spec": "any:1", "command": ["true"], "colour": 1}'),
    ("many bad fields", "tenant", JSON, json.dumps({f"f{k}": k for k in range(30)}).encode()),
    ("not JSON", "tenant", JSON, b'{"spec": '),
    ("not JSON, no token", "", JSON, b'{"spec": '),
    ("not UTF-8", "tenant", JSON, b'{"name": "\xff\xfe"}'),
    ("no content type", "tenant", {}, json.dumps(OK_JOB).encode()),
    ("text content type", "tenant", {"Content-Type": "text/plain"}, b"hello"),
    ("json+ content type", "tenant", {"Content-Type": "application/x+json"}, b"[]"),
    ("empty body", "tenant", JSON, b""),
    ("a list", "tenant", JSON, b"[1, 2]"),
    ("no token", "", JSON, json.dumps(OK_JOB).encode()),
    ("no token, unknown field", "", JSON, b'{"spec": "any:1", "command": ["true"], "colour": 1}'),
    ("no token, empty body", "", JSON, b""),
    ("agent token, unknown field", "agent", JSON, b'{"spec": "any:1", "colour": 1}'),
    (
        "not a bearer token",
        "",
        {**JSON, "Authorization": "Basic eDp5"},
        json.dumps(OK_JOB).encode(),
    ),
    ("unknown token", "xpp_nobody", JSON, json.dumps(OK_JOB).encode()),
    ("agent token", "agent", JSON, json.dumps(OK_JOB).encode()),
    ("unknown queue", "tenant", JSON, json.dumps({**OK_JOB, "queue": "nope"}).encode()),
    ("never fits", "tenant", JSON, b'{"spec": "nvidia:64", "command": ["true"]}'),
    ("nothing to run", "tenant", JSON, b'{"spec": "any:1"}'),
    ("priority over the cap", "tenant", JSON, json.dumps({**OK_JOB, "priority": 1000}).encode()),
    ("over the body limit", "tenant", JSON, b'{"name": "' + b"x" * (2 << 20) + b'"}'),
]


@pytest.mark.parametrize(
    ("who", "headers", "body"),
    [case[1:] for case in SUBMISSIONS],
    ids=[case[0] for case in SUBMISSIONS],
)
def test_a_submission_is_answered_as_without_workers(
    pools: tuple[Pool, Pool], who: str, headers: dict[str, str], body: bytes
) -> None:
    answers = []
    for pool in pools:
        sent = dict(headers)
        if who:
            sent["Authorization"] = f"Bearer {pool.token(who)}"
        r = pool.client.post("/v1/jobs", content=body, headers=sent)
        kind = r.headers.get("content-type", "")
        shown = _comparable(r.json()) if kind.startswith("application/json") else r.text
        answers.append((r.status_code, kind, r.headers.get("www-authenticate"), shown))
    assert answers[1] == answers[0]


def test_other_routes_pass_through_both_ways(pools: tuple[Pool, Pool]) -> None:
    _, pool = pools
    admin = pool.srv.headers()
    r = pool.client.post(
        "/v1/jobs", json=OK_JOB, headers={"Authorization": f"Bearer {pool.tenant_token}"}
    )
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    placed = until(
        lambda: (
            (j := pool.client.get(f"/v1/jobs/{job}", headers=admin).json())["assignments"] and j
        ),
        "the job's placement, read through the worker",
    )
    assert placed["state"] == "scheduled"
    listed = pool.client.get("/v1/jobs", params={"state": "scheduled"}, headers=admin).json()
    assert job in [j["id"] for j in listed]  # the query string went through
    assert pool.client.get("/healthz").text.startswith("ok")
    metrics = pool.client.get("/metrics", headers=admin)
    assert "xpupool_scheduling_pass_seconds" in metrics.text
    assert metrics.headers["content-type"].startswith("text/plain")
    page = pool.client.get("/", follow_redirects=True)
    assert page.status_code == 200 and "<html" in page.text.lower()
    huge = pool.client.post("/v1/tenants", content=b"x" * (2 << 20), headers={**admin, **JSON})
    assert huge.status_code == 413
    nothing = pool.client.get("/v1/nowhere", headers=admin)
    assert nothing.status_code == 404
    assert len(nothing.headers.get_list("date")) == 1  # the worker's, not the plane's as well


ACTIONS = ("submit", "cordon_node")  # through the submission channel, and through the plane
KINDS = ("queue:", "colour:", "node:")  # the reasons of the three rows the test makes


def test_an_admin_submission_is_audited_as_without_workers(pools: tuple[Pool, Pool]) -> None:
    """Through the submission channel and through the plane's HTTP server alike, the rows (a
    submission refused by the service, one refused by validation before the route ran, and
    another route's) name the same targets, reasons and the client's address, as the worker saw
    it."""
    rows = []
    for pool in pools:
        admin = pool.srv.headers()
        since = time.time() - 1
        r = pool.client.post(
            "/v1/jobs", json={**OK_JOB, "tenant": "t1", "queue": "x"}, headers=admin
        )
        assert r.status_code == 422
        r = pool.client.post("/v1/jobs", json={**OK_JOB, "colour": 1}, headers=admin)
        assert r.status_code == 422
        r = pool.client.post("/v1/nodes/nowhere/cordon", headers=admin)
        assert r.status_code == 404
        entries = pool.client.get("/v1/audit", params={"since": since}, headers=admin).json()
        mine = [_comparable(e) for e in entries if e["action"] in ACTIONS]
        rows.append([[e for e in mine if e["result"].startswith(k)][-1] for k in KINDS])
    assert rows[1] == rows[0]
    queue, colour, cordon = rows[0]
    assert queue["status"] == colour["status"] == 422, rows[0]
    assert queue["action"] == colour["action"] == "submit" and colour["target"] == "POST /v1/jobs"
    assert cordon["status"] == 404 and cordon["action"] == "cordon_node"
    assert all(e["source"] == "127.0.0.1" for e in rows[0])


def test_the_plane_listens_only_where_its_user_can_reach(pools: tuple[Pool, Pool]) -> None:
    _, pool = pools
    assert pool.srv.proc is not None
    worker = _children(pool.srv.proc.pid)
    assert len(worker) == 1
    argv = Path(f"/proc/{worker[0]}/cmdline").read_bytes().split(b"\0")
    channel = Path(argv[argv.index(b"--channel") + 1].decode())
    mode = stat.S_IMODE(channel.parent.stat().st_mode)
    assert mode == 0o700, oct(mode)
    assert stat.S_ISSOCK(channel.stat().st_mode)


def test_a_worker_that_dies_is_replaced(tmp_path: Path) -> None:
    with ServerProc(
        tmp_path / "data", cluster=CLUSTER_MIXED, extra_args=("--http-workers", "1")
    ) as srv:
        assert srv.proc is not None
        (first,) = _children(srv.proc.pid)
        os.kill(first, signal.SIGKILL)
        second = until(lambda: [p for p in _children(srv.proc.pid) if p != first], "a new worker")
        assert len(second) == 1
        ok = until(lambda: _get_ok(f"{srv.url}/healthz"), "the API answering again through it")
        assert ok


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _get_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_workers_go_with_the_plane(tmp_path: Path) -> None:
    srv = ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED, extra_args=("--http-workers", "2"))
    with srv:
        assert srv.proc is not None
        workers = _children(srv.proc.pid)
        assert len(workers) == 2
        os.kill(srv.proc.pid, signal.SIGKILL)  # the plane alone, as in a crash
        srv.proc.wait(10)
        until(lambda: not any(_running(w) for w in workers), "the workers' exit")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{srv.url}/healthz", timeout=2)


def test_a_plane_stopped_under_load_keeps_every_acknowledged_submission(tmp_path: Path) -> None:
    srv = ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED, extra_args=("--http-workers", "2"))
    acknowledged: list[int] = []
    stop = threading.Event()
    with srv:
        pool = Pool(srv)
        headers = {"Authorization": f"Bearer {pool.tenant_token}"}

        def submit() -> None:
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                while not stop.is_set():
                    try:
                        r = c.post(
                            "/v1/jobs", json={**OK_JOB, "spec": "any:1 mem=1Gi"}, headers=headers
                        )
                    except httpx.TransportError:
                        continue
                    if r.status_code == 201:
                        acknowledged.append(r.json()["id"])

        threads = [threading.Thread(target=submit) for _ in range(4)]
        for t in threads:
            t.start()
        until(lambda: len(acknowledged) > 50, "submissions flowing")
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGTERM)  # the plane only: it stops its workers itself
        srv.proc.wait(30)
        stop.set()
        for t in threads:
            t.join()
    with ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED) as again:
        found = httpx.get(
            f"{again.url}/v1/jobs", params={"limit": 1000}, headers=again.headers()
        ).json()
        listed = {j["id"] for j in found}
        for job in set(acknowledged) - listed:  # beyond the listing's newest 1,000
            r = httpx.get(f"{again.url}/v1/jobs/{job}", headers=again.headers())
            assert r.status_code == 200, (job, r.text)


def test_a_port_in_use_stops_up_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["up", "--no-agent", "--data", str(tmp_path / "data"), "--port", str(port)]
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from xpupool.cli import main; main()",
                *args,
                "--http-workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: cannot listen on 127.0.0.1:{port}: "), done.stderr
    assert "Traceback" not in done.stderr


ORPHAN_PARENT = """
import sys
from pathlib import Path
from xpupool.server.front.workers import HttpWorkers, PlaneSockets, listen
workers = HttpWorkers(1, listen("127.0.0.1", 0), PlaneSockets(Path(sys.argv[1])), max_body=1 << 20)
print(workers._spawn().pid, flush=True)
"""


def test_a_worker_whose_plane_died_before_it_was_ready_exits(tmp_path: Path) -> None:
    """The death signal is asked for only once the worker runs its own code; a plane that dies
    before then (a crash right after the start, a loaded machine) must still take it along. Here
    the "plane" exits as soon as the worker is spawned, long before the worker is ready."""
    out = tmp_path / "parent.out"
    with out.open("w") as sink:  # a file, not a pipe: the worker inherits it and lives on
        subprocess.run(
            [sys.executable, "-c", ORPHAN_PARENT, str(tmp_path)], stdout=sink, check=True
        )
    worker = int(out.read_text().split()[0])
    try:
        until(lambda: not _running(worker), "the orphaned worker's exit")
    finally:
        if _running(worker):
            os.kill(worker, signal.SIGKILL)
