"""Retries with backoff, a maximum run time and the retention of finished jobs (issue 20, part
5), with a real ``xpupool up`` whose in-process agent runs real processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, until
from test_agent_e2e import _alive

FAST = ("--heartbeat", "0.2")
FAIL = [JOB_PYTHON, "-c", "import sys; print('run', flush=True); sys.exit(1)"]
SLEEP = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(60)"]


@pytest.fixture
def srv(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProc]:
    extra = getattr(request, "param", ())
    with ServerProc(tmp_path / "data", agent=True, extra_args=(*FAST, *extra)) as server:
        r = httpx.post(f"{server.url}/v1/tenants", json={"name": "team"}, headers=server.headers())
        r.raise_for_status()
        yield server


def _submit(srv: ServerProc, **body: Any) -> int:
    r = httpx.post(f"{srv.url}/v1/jobs", json={"tenant": "team", **body}, headers=srv.headers())
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _job(srv: ServerProc, job_id: int) -> httpx.Response:
    return httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=5)


def _final(srv: ServerProc, job_id: int, timeout_s: float = 60) -> dict[str, Any]:
    final = ("succeeded", "failed", "cancelled", "lost")
    return dict(
        until(
            lambda: (j := _job(srv, job_id).json())["state"] in final and j,
            f"job {job_id} to end",
            timeout_s,
        )
    )


def _log(srv: ServerProc, job_id: int) -> str:
    return httpx.get(f"{srv.url}/v1/jobs/{job_id}/logs", headers=srv.headers(), timeout=5).text


def test_a_failing_job_is_retried_with_growing_waits_then_fails(srv: ServerProc) -> None:
    job_id = _submit(
        srv,
        command=FAIL,
        max_retries=2,
        retry_on=["exit_nonzero"],
        retry_backoff_s=1,
        retry_backoff_max_s=30,
    )
    job = _final(srv, job_id)
    assert job["state"] == "failed" and job["exit_code"] == 1
    assert job["attempts"] == 3 and job["retries"] == 2
    assert "no retries left" in job["reason"]
    # each retry waited its backoff: from the failure that asked for it to the next hand-out
    retry_at = [e["at"] for e in job["events"] if re.search(r"retry \d+ in", e["reason"])]
    handed_at = [e["at"] for e in job["events"] if re.match(r"attempt [23] handed", e["reason"])]
    assert len(retry_at) == 2 and len(handed_at) == 2
    assert handed_at[0] - retry_at[0] >= 1 and handed_at[1] - retry_at[1] >= 2
    log = until(lambda: (t := _log(srv, job_id)).count("run") == 3 and t, "three runs logged")
    assert log.index("[xpupool: attempt 2]") < log.index("[xpupool: attempt 3]")


def test_a_run_past_its_max_runtime_is_stopped_and_fails(srv: ServerProc) -> None:
    job_id = _submit(srv, command=SLEEP, max_runtime_s=2)
    started = until(
        lambda: [e["reason"] for e in _job(srv, job_id).json()["events"] if "(pid " in e["reason"]],
        "the run to start",
    )
    pid = int(started[0].rsplit("pid ", 1)[1].rstrip(")"))
    job = _final(srv, job_id, 30)
    assert job["state"] == "failed" and job["stop_cause"] == "max_runtime"
    assert "max_runtime_s (2 s)" in job["reason"]
    until(lambda: not _alive(pid), "the process to be gone", 10)


@pytest.mark.parametrize("srv", [("--retain-jobs", "2s")], indirect=True)
def test_finished_jobs_and_their_logs_go_after_the_retention(srv: ServerProc) -> None:
    running = _submit(srv, command=SLEEP)
    done = _submit(srv, command=[JOB_PYTHON, "-c", "print('bye')"])
    assert _final(srv, done)["state"] == "succeeded"
    until(lambda: "bye" in _log(srv, done), "the finished job's log")
    logs = srv.data / "logs" / str(done)
    assert logs.exists()
    until(lambda: _job(srv, done).status_code == 404, "the finished job to be forgotten", 30)
    assert not logs.exists()
    assert _job(srv, running).json()["state"] == "running"
    assert "up" in _log(srv, running)
    r = httpx.post(f"{srv.url}/v1/jobs/{running}/cancel", headers=srv.headers())
    assert r.status_code == 200


@pytest.mark.parametrize("srv", [("--retain-count", "50")], indirect=True)
def test_one_tenants_churn_keeps_another_tenants_finished_jobs_and_logs(srv: ServerProc) -> None:
    """Issue 43, item 7: 60 submit-and-cancel pairs of one tenant pushed another tenant's
    finished jobs and logs out of a global ``--retain-count 50``. The count is per tenant."""
    with srv.tenant_client("alpha") as alpha, srv.tenant_client("beta") as beta:
        kept = []
        for word in ("first", "second"):
            r = beta.post("/v1/jobs", json={"command": [JOB_PYTHON, "-c", f"print('{word}')"]})
            assert r.status_code == 201, r.text
            kept.append((int(r.json()["id"]), word))
        for job_id, word in kept:
            assert _final(srv, job_id)["state"] == "succeeded"
            until(lambda j=job_id, w=word: w in _log(srv, j), f"job {job_id}'s log")
        churn = []
        for _ in range(60):
            r = alpha.post("/v1/jobs", json={"command": SLEEP})
            assert r.status_code == 201, r.text
            churn.append(int(r.json()["id"]))
            assert alpha.post(f"/v1/jobs/{churn[-1]}/cancel").status_code == 200
        final = ("cancelled", "succeeded", "failed")
        for job_id in churn:  # ended, or already forgotten by the sweep
            until(
                lambda j=job_id: (
                    (r := _job(srv, j)).status_code == 404 or r.json()["state"] in final
                ),
                f"job {job_id} to end",
            )

        def alphas() -> list[int]:
            r = alpha.get("/v1/jobs", params={"limit": 1000})
            assert r.status_code == 200, r.text
            return [int(j["id"]) for j in r.json()]

        until(lambda: len(alphas()) == 50, "alpha's oldest finished jobs to be forgotten", 60)
        assert set(alphas()) <= set(churn)  # the 10 that went are alpha's own
        for job_id, word in kept:
            r = _job(srv, job_id)
            assert r.status_code == 200, f"beta's job {job_id} was forgotten: {r.text}"
            assert r.json()["state"] == "succeeded"
            assert word in _log(srv, job_id)
            assert (srv.data / "logs" / str(job_id)).exists()
