"""A reservation against a real ``xpupool up`` and a real agent running real processes (issue 54
part 4): made half a minute ahead on one of two cards, the card is lent to a preemptible job
until the window begins; then that job is preempted and the job booked into the reservation
starts on the card, while a job that is not preemptible, kept off the reserved card, runs on.
Refusals (a window in the past, an end before the start, cards the pool cannot hold beside an
overlapping reservation, a name taken) name the field and store nothing. No timing is asserted:
only the order of what happened."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(300)"]
AHEAD_S = 30.0  # long enough for the borrower to start first on a loaded machine


def test_a_reserved_card_is_lent_then_reclaimed_for_the_booked_job(tmp_path: Path) -> None:
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "1")
        try:
            with (
                srv.tenant_client("team") as team,
                httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin,
            ):
                until(lambda: admin.get("/v1/nodes").json(), "the agent's node", 60)
                now = time.time()
                window = {"tenant": "team", "cards": "A100x1"}
                window |= {"start_at": now + AHEAD_S, "end_at": now + 3600}
                r = admin.post("/v1/reservations", json={"name": "r", **window})
                assert r.status_code == 201, r.text
                held = r.json()["devices"]
                assert len(held) == 1 and r.json()["phase"] == "ahead"

                refusals = [
                    ({"name": "past", **window, "start_at": now - 60}, "start_at"),
                    ({"name": "short", **window, "end_at": now + AHEAD_S}, "end_at"),
                    ({"name": "more", **window, "cards": "A100x2"}, "cards"),
                    ({"name": "odd", **window, "cards": "four"}, "cards"),
                ]
                for body, field in refusals:
                    r = admin.post("/v1/reservations", json=body)
                    assert r.status_code == 422, r.text
                    assert r.json()["field"] == field, r.text
                assert (
                    admin.post("/v1/reservations", json={"name": "r", **window}).status_code == 409
                )
                assert [x["name"] for x in admin.get("/v1/reservations").json()] == ["r"]
                assert [x["name"] for x in team.get("/v1/reservations").json()] == ["r"]
                assert (
                    team.post("/v1/reservations", json={"name": "t", **window}).status_code == 403
                )

                def submit(**body: Any) -> int:
                    r = team.post("/v1/jobs", json={"request": "A100:1", "command": SLEEPS, **body})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                def cards(job_id: int) -> list[str]:
                    return [d["uuid"] for a in job(job_id)["assignments"] for d in a["devices"]]

                steady = submit()  # not preemptible: kept off the reserved card
                until(lambda: job(steady)["state"] == "running", "the steady job", 90)
                assert cards(steady) and held[0] not in cards(steady)
                borrower = submit(preemptible=True)
                booked = submit(reservation="r")
                until(lambda: job(borrower)["state"] == "running", "the borrower", 90)
                assert cards(borrower) == held
                assert job(booked)["state"] == "pending"
                assert "reservation r begins" in job(booked)["reason"]
                assert time.time() < now + AHEAD_S, "the borrower started after the window"

                until(lambda: job(booked)["state"] == "running", "the booked job", 120)
                assert cards(booked) == held
                events = " ".join(e["reason"] for e in job(borrower)["events"])
                assert "reservation r begins" in events, events
                assert job(borrower)["state"] in ("pending", "failed")  # stopped, not running
                assert job(steady)["state"] == "running"
                refused = team.post(
                    "/v1/jobs", json={"request": "A100:1", "command": SLEEPS, "reservation": "x"}
                )
                assert refused.status_code == 422 and refused.json()["field"] == "reservation"
        finally:
            stop_process(agent)
            print(agent_log.read_text()[-2000:])
