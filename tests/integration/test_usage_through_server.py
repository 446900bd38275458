"""Metering with a real server, a real agent and real processes (issue 52): each attempt of a job
is one usage record per card, and its seconds are, to the second, what the job's own timestamped
events say (its start to its end), through a preemption, a retry after a non-zero exit and a
SIGKILL of the server with the run adopted after the restart. A tenant reads only its own usage,
and the CLI prints it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import CLI, FAKE
from test_job_intent import _job, _team

pytestmark = pytest.mark.slow

FAST_UP = ("--heartbeat", "0.2", "--lost-after", "60", "--lease", "30", "--usage-interval", "0.2s")
# Waits for the file named by argv[1]; then exits 1 the first time (it leaves argv[2]), else 0.
WAIT_THEN_FAIL_ONCE = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "if not os.path.exists(sys.argv[2]):\n"
    "    open(sys.argv[2], 'w').close()\n"
    "    sys.exit(1)\n"
)


def _records(data: Path, job_id: int) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT * FROM usage_records WHERE job_id = ? ORDER BY attempt", (job_id,)
        ).fetchall()
        return [dict(r) for r in rows]


def _runs(job: dict[str, Any]) -> list[tuple[float, float]]:
    """(start, end) of each attempt from the job's events: a 'started on' event, then the first
    event after it that leaves the running state."""
    runs: list[tuple[float, float]] = []
    start: float | None = None
    for e in job["events"]:
        if e["reason"].startswith("started on"):
            start = e["at"]
        elif start is not None and e["state"] != "running":
            runs.append((start, e["at"]))
            start = None
    return runs


def _submit(srv: ServerProc, token: str, body: dict[str, Any]) -> int:
    r = httpx.post(f"{srv.url}/v1/jobs", json=body, headers=srv.headers(token))
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_usage_per_attempt_equals_the_jobs_events(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProc(data, extra_args=FAST_UP).start()
    agent: subprocess.Popen[bytes] | None = None
    # a directory the job's uid can use (pytest's is private to this uid; a job has its own /tmp)
    flags = Path(tempfile.mkdtemp(prefix="xpupool-usage-test-", dir="/var/lib"))
    flags.chmod(0o777)
    try:
        tokens = _team(srv)
        # priced by the admin's table from now on: the CLI's CSV gets each row's cost
        prices = {"currency": "EUR", "models": [{"model": "A100-SXM4-80GB", "per_card_hour": 3.6}]}
        (tmp_path / "prices.yaml").write_text(json.dumps(prices))
        admin_env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": srv.admin_token}
        out = subprocess.run(
            [*CLI, "usage", "prices", "set", str(tmp_path / "prices.yaml")],
            env=admin_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "A100-SXM4-80GB: 3.6 per card-hour" in out.stdout
        assert httpx.get(f"{srv.url}/v1/prices", headers=srv.headers()).json()["currency"] == "EUR"
        r = httpx.put(
            f"{srv.url}/v1/queues/team",
            json={"name": "team", "tenant": "team", "quotas": [], "max_priority": 5},
            headers=srv.headers(),
        )
        assert r.status_code == 200, r.text
        how = ("--grace", "1", "--poll", "0.05", "--work-dir", str(tmp_path / "agent"))
        agent = subprocess.Popen(
            [*CLI, "agent", "--server", srv.url, "--node", "box", "--fake", str(FAKE), *how],
            stdout=(tmp_path / "agent.log").open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": tokens["agent"]},
        )
        user = tokens["tenant"]
        go_low, once, go_high = flags / "go-low", flags / "once", flags / "go-high"
        low = _submit(
            srv,
            user,
            {
                "command": [JOB_PYTHON, "-c", WAIT_THEN_FAIL_ONCE, str(go_low), str(once)],
                "spec": "A100:2",
                "retry_on": ["preempted", "exit_nonzero"],
                "retry_backoff_s": 0,
            },
        )
        until(lambda: _runs(_job(srv, low)) or _job(srv, low)["state"] == "running", "low runs")
        high = _submit(
            srv,
            user,
            {
                "command": [JOB_PYTHON, "-c", WAIT_THEN_FAIL_ONCE, str(go_high), str(go_high)],
                "spec": "A100:2 priority=5",
            },
        )
        until(lambda: _job(srv, high)["state"] == "running", "high runs, low preempted", 60)
        srv.kill()  # a crash while high runs
        srv.start(same_port=True)  # where the agent looks for it
        until(
            lambda: any("adopted" in e["reason"] for e in _job(srv, high)["events"]),
            "high adopted",
        )
        go_high.touch()  # exits 0 (its flag is the file it waits for)
        go_low.touch()  # low's next attempt exits 1 once, its retry 0
        until(lambda: _job(srv, high)["state"] == "succeeded", "high's end", 60)
        until(lambda: _job(srv, low)["state"] == "succeeded", "low's retries", 60)
        for job_id, attempts in ((low, 3), (high, 1)):
            job = _job(srv, job_id)
            runs = _runs(job)
            assert job["attempts"] == attempts and len(runs) == attempts, job["events"]
            records = until(
                lambda j=job_id, n=2 * attempts: (
                    (rows := _records(data, j))
                    and all(r["ended_at"] is not None for r in rows)
                    and len(rows) == n
                    and rows
                ),
                f"job {job_id}'s records closed",
            )
            for attempt, (start, end) in enumerate(runs, 1):
                mine = [r for r in records if r["attempt"] == attempt]
                assert len(mine) == 2  # one per card
                for rec in mine:
                    assert abs(rec["started_at"] - start) <= 1.0, (rec, start)
                    assert abs(rec["ended_at"] - end) <= 1.0, (rec, job["events"])
                    assert abs(rec["seconds"] - (end - start)) <= 1.0, (rec, end - start)
        # the tenant's CLI reads its own usage; another tenant's token sees none of it
        env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": user}
        out = subprocess.run(
            [*CLI, "usage", "--from", "1d", "-o", "json", "--by", "tenant,model"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)["rows"]
        assert {r["tenant"] for r in rows} == {"team"}
        total = sum(r["device_seconds"] for r in rows)
        expected = sum(r["device_seconds"] for j in (low, high) for r in _records(data, j))
        assert total == pytest.approx(expected, rel=1e-6)
        with srv.tenant_client("other") as other:
            theirs = other.get("/v1/usage", params={"from": str(time.time() - 86400)})
            assert theirs.status_code == 200 and theirs.json()["rows"] == []
        # the admin sets the tenant's budget with the CLI; the tenant reads its own
        budget = ["budget", "set", "team", "--period", "month", "--amount", "1000"]
        out = subprocess.run(
            [*CLI, "usage", *budget, "--policy", "refuse"],
            env=admin_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        out = subprocess.run(
            [*CLI, "usage", "budget", "show", "team"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "of 1000 EUR per month (within); policy refuse" in out.stdout, out.stdout
        out = subprocess.run(
            [*CLI, "usage", "--from", "1d", "-o", "csv", "--by", "tenant"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        header, *lines = out.stdout.splitlines()
        assert header.endswith(",kWh,cost (EUR)"), header
        cost = sum(float(line.rsplit(",", 1)[1]) for line in lines)
        assert cost == pytest.approx(expected / 3600 * 3.6, abs=0.01 * len(lines))
    finally:
        for flag in (flags / "go-low", flags / "go-high"):
            flag.touch()
        if agent is not None:
            stop_process(agent)
        srv.stop()
        shutil.rmtree(flags, ignore_errors=True)
