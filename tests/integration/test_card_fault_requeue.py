"""A card that turns unhealthy under a running job, with a real ``xpupool up`` and a real ``xpupool
agent`` reading a fake-probe file (issue 46, card health): the job is stopped and requeued by its
on_node_lost policy onto the healthy card, the sick card is refused for a new job, and it comes
back after the settle period (``--card-settle``, short here) once its agent reads it healthy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

A100 = "NVIDIA A100-SXM4-80GB"
SLEEP = [JOB_PYTHON, "-c", "import time; time.sleep(600)"]


def write_cards(path: Path, sick: str | None = None) -> None:
    """Two A100s, ``GPU-a-0`` and ``GPU-b-0``; ``sick`` (one of them) reads XID 79."""
    entries: list[dict[str, Any]] = []
    for prefix in ("GPU-a", "GPU-b"):
        entry: dict[str, Any] = {"vendor": "nvidia", "model": A100, "memory": "80Gi"}
        entry |= {"driver": "550.54.15", "runtimes": {"cuda": "12.4"}, "uuid_prefix": prefix}
        if sick == f"{prefix}-0":
            entry |= {"healthy": False, "health_cause": "xid-79: GPU has fallen off the bus"}
        entries.append(entry)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"devices": entries}))
    tmp.replace(path)  # the agent never reads half a file


def test_a_card_that_fails_under_a_job_empties_and_comes_back(tmp_path: Path) -> None:
    cards = tmp_path / "cards.yaml"
    write_cards(cards)
    args = ("--heartbeat", "0.2", "--card-settle", "3")
    with ServerProc(tmp_path / "data", extra_args=args) as srv:
        agent, log = srv.start_agent(tmp_path, "box", cards, "--grace", "1")
        try:
            _run(srv, cards, log)
        finally:
            stop_process(agent)


def _run(srv: ServerProc, cards: Path, log: Path) -> None:
    def why() -> str:
        return log.read_text()[-3000:]

    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
    user = srv.tenant_client("team")
    with admin, user:

        def job(job_id: int) -> dict[str, Any]:
            return dict(user.get(f"/v1/jobs/{job_id}").json())

        def card(uuid: str) -> dict[str, Any]:
            return next(d for d in admin.get("/v1/devices").json() if d["uuid"] == uuid)

        def running_on(job_id: int) -> str | None:
            j = job(job_id)
            if j["state"] != "running" or not j["assignments"]:
                return None
            return str(j["assignments"][0]["devices"][0]["uuid"])

        until(lambda: admin.get("/v1/nodes/box").status_code == 200, f"node box ({why()})")
        r = user.post("/v1/jobs", json={"command": SLEEP, "spec": "A100"})
        assert r.status_code == 201, r.text
        first = r.json()["id"]
        sick = until(lambda: running_on(first), f"job {first} running ({why()})", 60)
        other = "GPU-b-0" if sick == "GPU-a-0" else "GPU-a-0"

        write_cards(cards, sick=sick)
        # stopped, requeued by its on_node_lost policy (requeue), and run on the healthy card
        until(lambda: running_on(first) == other, f"job {first} on {other} ({why()})", 60)
        got = job(first)
        assert got["retries"] == 1, got
        assert any(f"card {sick} on box unhealthy: xid-79" in e["reason"] for e in got["events"])
        bad = card(sick)
        assert bad["healthy"] is False and bad["cordoned"] is True, bad
        assert bad["health"] == "unhealthy" and bad["health_cause"].startswith("xid-79: ")

        r = user.post("/v1/jobs", json={"command": SLEEP, "spec": "A100"})
        second = r.json()["id"]
        assert job(second)["state"] == "pending"  # the healthy card is taken, the sick refused
        metrics = admin.get("/metrics").text
        assert 'xpupool_device_health_events_total{cause="xid-79"} 1.0' in metrics

        write_cards(cards)  # healthy again: back after the settle period
        until(lambda: running_on(second) == sick, f"job {second} on {sick} ({why()})", 60)
        back = card(sick)
        assert back["cordoned"] is False and back["health"] == "healthy", back
        for job_id in (first, second):
            user.post(f"/v1/jobs/{job_id}/cancel")
