"""The scheduling cycle re-cuts a MIG card for a job end to end (issue 53): a real ``xpupool up``
and a real ``xpupool agent`` whose fake probe reads an A100 cut 3g.40gb@0, 2g.20gb@4, 1g.10gb@6,
with the fake ``nvidia-smi`` on the agent's PATH (the setup of ``test_card_recut_agent.py``).
A ``mig=4g.40gb`` job fits no instance; while a job runs on 3g.40gb@0, the only place a 4g can
start, the card is never chosen and the job waits; once that job is cancelled, the cycle proposes
the re-cut, the plane asks it (the job's events say so), the agent applies it, the new instance
registers and the job runs on it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_card_recut_agent import CARD, _card, _layout, fake_box

from xpupool.probes.fake_tool import FAIL_ENV

pytestmark = pytest.mark.slow

SHOW = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
HOLD = "import time; time.sleep(600)"


def _job(user: httpx.Client, spec: str, code: str) -> int:
    r = user.post("/v1/jobs", json={"spec": spec, "command": [JOB_PYTHON, "-c", code]})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _state(user: httpx.Client, job: int) -> dict[str, Any]:
    r = user.get(f"/v1/jobs/{job}")
    r.raise_for_status()
    return dict(r.json())


@contextmanager
def _restarted(srv: ServerProc, token: str) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """``srv`` stopped and started again on its port: an admin client and one for ``token``."""
    srv.stop()
    srv.start(same_port=True)
    with (
        httpx.Client(base_url=srv.url, headers=srv.headers()) as admin,
        httpx.Client(base_url=srv.url, headers={"Authorization": token}) as user,
    ):
        yield admin, user


def test_a_partition_job_runs_after_the_cycle_recuts_a_card_nothing_runs_on(
    tmp_path: Path,
) -> None:
    fake, env = fake_box(tmp_path)
    extra = ("--heartbeat", "0.2", "--recut-min-idle", "0s")
    with ServerProc(tmp_path / "data", extra_args=extra) as srv:
        agent, log = srv.start_agent(tmp_path, "box", fake, "--poll", "0.05", env=env)
        try:
            with (
                httpx.Client(base_url=srv.url, headers=srv.headers()) as admin,
                srv.tenant_client("team") as user,
            ):
                before = ["1g.10gb@6", "2g.20gb@4", "3g.40gb@0"]
                until(lambda: _layout(admin) == before, f"the card's instances ({log})")
                holder = _job(user, "A100 mig=3g.40gb", HOLD)
                until(lambda: _state(user, holder)["state"] == "running", f"job {holder} runs")
                wanted = _job(user, "A100 mig=4g.40gb", SHOW)
                until(
                    lambda: "nodes fit" in _state(user, wanted)["reason"],
                    f"job {wanted} is tried and waits",
                )
                # a 4g starts at slice 0 only, where a job holds the 3g: never re-cut
                assert "re-cutting" not in _state(user, wanted)["reason"]
                assert not any(e["event"] == "asked" for e in _card(admin)["events"])
                assert _layout(admin) == before
                user.post(f"/v1/jobs/{holder}/cancel").raise_for_status()
                until(
                    lambda: _state(user, wanted)["state"] == "succeeded",
                    f"job {wanted} ran after a re-cut ({log.read_text()[-2000:]})",
                    90,
                )
                events = [e["reason"] for e in _state(user, wanted)["events"]]
                said = [e for e in events if f"re-cutting {CARD} on box to " in e]
                assert said and said[0].endswith("for this job"), events
                assert "4g.40gb@0" in said[0], said
                card = _card(admin)
                assert [e["event"] for e in card["events"][:2]] == ["applied", "asked"], card
                assert f"for job {wanted}" in card["events"][1]["detail"], card
                assert _layout(admin) == ["1g.10gb@6", "2g.20gb@4", "4g.40gb@0"]
                logs = user.get(f"/v1/jobs/{wanted}/logs").text.strip()
                assert logs == f"MIG-{CARD}-0", logs  # it ran on the new 4g.40gb instance
        finally:
            stop_process(agent)


def test_a_failed_recut_rests_the_card_until_the_admin_asks_again(tmp_path: Path) -> None:
    """The tool refuses to create the 4g.40gb the cycle asks for: the card is not asked again
    pass after pass, its layout answer and the job's reason say it rests, a restart of the
    plane keeps the rest (failures and resting_until as before, nothing asked again), and the
    admin's PUT ends the rest."""
    fake, env = fake_box(tmp_path, **{FAIL_ENV: "4g.40gb"})
    extra = ("--heartbeat", "0.2", "--recut-min-idle", "0s")
    srv = ServerProc(tmp_path / "data", extra_args=extra)
    with srv:
        agent, log = srv.start_agent(tmp_path, "box", fake, "--poll", "0.05", env=env)
        try:
            with (
                httpx.Client(base_url=srv.url, headers=srv.headers()) as admin,
                srv.tenant_client("team") as user,
            ):
                until(lambda: len(_layout(admin)) == 3, f"the card's instances ({log})")
                wanted = _job(user, "A100 mig=4g.40gb", SHOW)
                until(
                    lambda: any(e["event"] == "failed" for e in _card(admin)["events"]),
                    f"the re-cut failed ({log.read_text()[-2000:]})",
                )
                until(
                    lambda: "none proposed before" in _state(user, wanted)["reason"],
                    f"job {wanted}'s reason names the rest",
                )
                card = _card(admin)
                # asked once: the passes after the failure proposed nothing
                assert [e["event"] for e in card["events"]] == ["failed", "asked"], card
                assert card["failures"] == 1, card
                assert card["resting_until"] is not None, card
                assert "failed on demand" in _state(user, wanted)["reason"]
                assert _state(user, wanted)["state"] == "pending"
                token = user.headers["Authorization"]
            with _restarted(srv, token) as (admin, user):
                again = _card(admin)
                assert again["failures"] == 1, again
                assert again["resting_until"] == card["resting_until"], again
                # a job on the free 1g.10gb, tried after the first by the restarted plane
                marker = _job(user, "A100 mig=1g.10gb", HOLD)
                until(lambda: _state(user, marker)["state"] == "running", f"job {marker} runs")
                said = _state(user, wanted)["reason"]
                assert "none proposed before" in said and "failed on demand" in said, said
                card = _card(admin)
                assert [e["event"] for e in card["events"]] == ["failed", "asked"], card
                user.post(f"/v1/jobs/{marker}/cancel").raise_for_status()
                until(lambda: _state(user, marker)["state"] == "cancelled", f"{marker} stopped")
                r = admin.put(f"/v1/nodes/box/cards/{CARD}/layout", json={"layout": ["3g.40gb@0"]})
                assert r.status_code == 200, r.text
                assert r.json()["failures"] == 0 and r.json()["resting_until"] is None, r.json()
        finally:
            stop_process(agent)


def test_a_restarted_plane_keeps_which_job_waits_for_which_recut(tmp_path: Path) -> None:
    """The cycle asks a re-cut for a job while the agent is away; the plane restarts: it answers
    the job with the re-cut in flight (no other asked), and once the agent is back and has cut
    the card, the job runs on the new instance."""
    fake, env = fake_box(tmp_path)
    extra = ("--heartbeat", "0.2", "--recut-min-idle", "0s", "--lost-after", "300")
    srv = ServerProc(tmp_path / "data", extra_args=extra)
    with srv:
        agent, log = srv.start_agent(tmp_path, "box", fake, "--poll", "0.05", env=env)
        try:
            with (
                httpx.Client(base_url=srv.url, headers=srv.headers()) as admin,
                srv.tenant_client("team") as user,
            ):
                until(lambda: len(_layout(admin)) == 3, f"the card's instances ({log})")
                stop_process(agent)  # away: the re-cut stays in flight
                wanted = _job(user, "A100 mig=4g.40gb", SHOW)
                until(
                    lambda: "re-cutting" in _state(user, wanted)["reason"],
                    f"a re-cut asked for job {wanted}",
                )
                token = user.headers["Authorization"]
            with _restarted(srv, token) as (admin, user):
                # a job on the free 1g.10gb, tried after the first by the restarted plane
                marker = _job(user, "A100 mig=1g.10gb", HOLD)
                until(
                    lambda: (
                        _state(user, marker)["state"] != "pending"
                        or bool(_state(user, marker)["reason"])
                    ),
                    f"job {marker} tried",
                )
                said = _state(user, wanted)["reason"]  # it still waits for its re-cut
                assert f"re-cutting {CARD} on box to " in said and "for this job" in said, said
                card = _card(admin)
                assert [e["event"] for e in card["events"]] == ["asked"], card  # no other
                assert card["job"] == wanted, card
                user.post(f"/v1/jobs/{marker}/cancel").raise_for_status()
                agent, log = srv.start_agent(
                    tmp_path, "box", fake, "--poll", "0.05", env=env, again=True
                )
                until(
                    lambda: _state(user, wanted)["state"] == "succeeded",
                    f"job {wanted} ran after the re-cut ({log.read_text()[-2000:]})",
                    90,
                )
                logs = user.get(f"/v1/jobs/{wanted}/logs").text.strip()
                assert logs == f"MIG-{CARD}-0", logs  # on the new 4g.40gb instance
        finally:
            stop_process(agent)
