"""Jobs an older release stored that could never run are settled on start
(``services/stored_jobs.py``): failed with the reason, their devices freed."""

from __future__ import annotations

import pytest
from server_kit import BOTH_STORES, Server, devices, job, node, submit, tenant
from sqlalchemy import update

from xpupool.server.services.stored_jobs import settle_stored_jobs
from xpupool.server.storage.jobs import jobs as t_jobs

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


@pytest.mark.slow
def test_a_held_job_with_a_nul_in_its_command_is_failed_and_its_devices_freed(
    server: Server,
) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    held = submit(server, lab, "A100:2")
    fine = submit(server, lab, "A100:1")
    server.schedule()
    assert job(server, held["id"])["state"] == "scheduled"
    with server.plane.db.begin() as conn:  # as a release before issue 18 stored it
        command = ["python", "-c", "print(1)\x00"]
        conn.execute(update(t_jobs).where(t_jobs.c.id == held["id"]).values(command=command))
    settle_stored_jobs(server.plane)
    got = job(server, held["id"])
    assert got["state"] == "failed" and "command[2]" in got["reason"] and "NUL" in got["reason"]
    assert held["id"] not in server.plane.held_jobs
    assert sum(1 for d in devices(server) if d["jobs"]) == 1  # only the other job's card
    assert job(server, fine["id"])["state"] == "scheduled"
