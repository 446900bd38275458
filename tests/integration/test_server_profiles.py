"""Profiles in the real server: ``xpupool up --profile FILE`` places by the file's profiles, a
queue and a job may name one, and unknown names or a bad file are refused at the edge.

The pool is examples/cluster-mixed.yaml with ``--no-agent``, so a placed job stays ``scheduled``.
The file's profile ``loose-uuids`` turns off the ``DeviceUuid`` filter: a job asking for a card
UUID no node has is refused at submission under the default profile (nothing could hold it) and
placed under that one, which is how these tests see which profile placed a job. "Nothing
stored" is read from the SQLite file.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import CLUSTER_MIXED, ROOT, ServerProc, until

PROFILES = """
profiles:
  - name: loose-uuids
    base: binpack
    plugins:
      filter: {disabled: [{name: DeviceUuid}]}
"""
GHOST = {"devices": {"count": 1, "uuids": ["no-such-card"]}}


def _count(data: Path, sql: str, *args: object) -> int:
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        return int(db.execute(sql, args).fetchone()[0])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, httpx.Client]]:
    root = tmp_path_factory.mktemp("profiles")
    (root / "profiles.yaml").write_text(PROFILES)
    args = ("--profile", str(root / "profiles.yaml"))
    with ServerProc(root / "data", cluster=CLUSTER_MIXED, extra_args=args) as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        assert admin.post("/v1/tenants", json={"name": "vision"}).status_code == 201
        yield srv, admin
        admin.close()


def _submit(admin: httpx.Client, request: dict[str, Any], queue: str = "vision") -> Any:
    body = {"tenant": "vision", "queue": queue, "request": request, "command": ["true"]}
    return admin.post("/v1/jobs", json=body)


def _state(admin: httpx.Client, job_id: int) -> str:
    return str(admin.get(f"/v1/jobs/{job_id}").json()["state"])


def test_job_naming_a_file_profile_is_placed_by_it(server: tuple[ServerProc, httpx.Client]) -> None:
    _, admin = server
    loose = _submit(admin, {**GHOST, "node_policy": "loose-uuids"})
    strict = _submit(admin, GHOST)  # the default profile needs that card: nothing could hold it
    assert loose.status_code == 201
    assert strict.status_code == 422 and strict.json()["field"] == "request.devices.uuids[0]"
    until(lambda: _state(admin, loose.json()["id"]) == "scheduled", "the loose job placed")


def test_queue_profile_applies_to_its_jobs(server: tuple[ServerProc, httpx.Client]) -> None:
    _, admin = server
    queue = {"name": "loose", "tenant": "vision", "profile": "loose-uuids"}
    r = admin.put("/v1/queues/loose", json=queue)
    assert r.status_code == 200 and r.json()["profile"] == "loose-uuids"
    job = _submit(admin, GHOST, queue="loose").json()
    until(lambda: _state(admin, job["id"]) == "scheduled", "the job of the loose queue placed")


def test_unknown_profile_names_are_refused_and_nothing_stored(
    server: tuple[ServerProc, httpx.Client],
) -> None:
    srv, admin = server
    jobs = _count(srv.data, "SELECT count(*) FROM jobs")
    r = _submit(admin, {"devices": {"count": 1}, "node_policy": "nope"})
    assert r.status_code == 422 and r.json()["field"] == "request.node_policy"
    assert _count(srv.data, "SELECT count(*) FROM jobs") == jobs
    r = admin.put("/v1/queues/odd", json={"name": "odd", "tenant": "vision", "profile": "nope"})
    assert r.status_code == 422 and r.json()["field"] == "profile"
    assert _count(srv.data, "SELECT count(*) FROM queues WHERE name = 'odd'") == 0
    assert admin.get("/v1/queues/odd").status_code == 404


def test_bad_profile_file_stops_up_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles:\n  - name: p\n    plugins: {score: {enabled: [{name: binpak}]}}\n")
    up = ["up", "--no-agent", "--data", str(tmp_path / "data"), "--profile", str(bad)]
    done = subprocess.run(
        [sys.executable, "-c", "from xpupool.cli import main; main()", *up],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "profiles[0].plugins.score.enabled[0].name" in lines[0] and "binpak" in lines[0]
    assert not (tmp_path / "data" / "state.db").exists()


def test_restart_without_the_file_fails_jobs_waiting_on_its_profile(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    srv = ServerProc(
        tmp_path / "data", cluster=CLUSTER_MIXED, extra_args=("--profile", str(profiles))
    )
    with srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        assert admin.post("/v1/tenants", json={"name": "vision"}).status_code == 201
        kept = {"name": "vision", "tenant": "vision", "allow_unfittable": True}
        assert admin.put("/v1/queues/vision", json=kept).status_code == 200
        never = {"cpu": "1000", "node_policy": "loose-uuids"}  # no node has 1,000 cores
        job = _submit(admin, never).json()
        admin.close()
        srv.stop()
        srv.extra_args = ()
        srv.start()
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        found = admin.get(f"/v1/jobs/{job['id']}").json()
        assert found["state"] == "failed" and "loose-uuids" in found["reason"]
        admin.close()
