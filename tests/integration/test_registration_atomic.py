"""Registration is all or nothing, drains what live work holds, and no stored state stops a start
(issue 18, item 3).

A real ``xpupool up`` and real ``xpupool agent`` processes on 127.0.0.1. Each agent reads fake cards
from a YAML file that the test rewrites, as pulling a card from a host changes what the probes see;
the agent then registers the new inventory by itself. One server serves the agent tests in turn (a
start costs seconds on a shared machine); the start-up test writes an inconsistent database with
sqlite3, as a buggy past release or a hand edit would, and starts a server of its own on it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import server_proc
from job_commands import JOB_PYTHON
from server_proc import CLUSTER_MIXED, ServerProc, until

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
SLEEP = [JOB_PYTHON, "-c", "import time; time.sleep(120)"]
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def cards(path: Path, *groups: tuple[str, str, str]) -> None:
    """Write a fake-probe file: one card per ``(model, memory, uuid_prefix)``; a card's UUID is
    ``<prefix>-0``."""
    entries = [
        {
            "vendor": "nvidia",
            "model": model,
            "count": 1,
            "memory": memory,
            "driver": "560.35.03",
            "runtimes": {"cuda": "12.6"},
            "uuid_prefix": prefix,
        }
        for model, memory, prefix in groups
    ]
    path.write_text(json.dumps({"devices": entries}))  # JSON is YAML


@dataclass
class Pool:
    srv: ServerProc
    admin: httpx.Client
    user: httpx.Client
    tmp: Path
    agents: list[subprocess.Popen[bytes]]

    def agent(self, node: str, fake: Path, *flags: str) -> Path:
        """Start ``xpupool agent`` for ``node`` with its own agent token; returns its log."""
        r = self.admin.post("/v1/tenants/team/tokens", json={"role": "agent", "name": node})
        assert r.status_code == 201, r.text
        log = self.tmp / f"agent-{node}.log"
        proc = subprocess.Popen(
            [
                *CLI,
                "agent",
                "--server",
                self.srv.url,
                "--node",
                node,
                "--fake",
                str(fake),
                "--grace",
                "1",
                "--poll",
                "0.05",
                "--work-dir",
                str(self.tmp / f"work-{node}"),
                *flags,
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": r.json()["token"]},
        )
        self.agents.append(proc)
        return log

    def submit(self, spec: str) -> int:
        r = self.user.post("/v1/jobs", json={"command": SLEEP, "spec": spec})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.user.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def wait_state(self, job_id: int, state: str) -> dict[str, Any]:
        return dict(until(lambda: (j := self.job(job_id))["state"] == state and j, f"{state}"))

    def devices(self, node: str) -> dict[str, dict[str, Any]]:
        r = self.admin.get("/v1/devices", params={"node": node})
        assert r.status_code == 200, r.text
        return {d["uuid"]: d for d in r.json()}

    def restart(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Stop the server and start it again on the same data and port: the agents, which know
        only that URL, carry on."""
        port = self.srv.port
        self.srv.stop()
        monkeypatch.setattr(server_proc, "free_port", lambda: port)
        self.srv.start()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    tmp = tmp_path_factory.mktemp("atomic")
    # heartbeats every 0.2 s; a node is lost only after 60 s, longer than any test here waits
    srv = ServerProc(tmp / "up", extra_args=("--heartbeat", "0.2", "--lost-after", "60"))
    srv.start()
    admin = httpx.Client(base_url=srv.url, headers=srv.headers())
    admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
    r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
    r.raise_for_status()
    user = httpx.Client(base_url=srv.url, headers=srv.headers(r.json()["token"]))
    found = Pool(srv, admin, user, tmp, [])
    try:
        yield found
    finally:
        for proc in found.agents:
            proc.terminate()
        for proc in found.agents:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        admin.close()
        user.close()
        srv.stop()


def registered(pool: Pool, node: str, devices: int) -> None:
    until(
        lambda: (
            (r := pool.admin.get(f"/v1/nodes/{node}")).status_code == 200
            and r.json()["devices"] == devices
        ),
        f"{node} registered with {devices} devices",
    )


def refused(log: Path, status: str) -> str | None:
    """The agent's log line for a registration the server refused with ``status``."""
    lines = log.read_text().splitlines()
    return next((ln for ln in lines if "registration of" in ln and f": {status} " in ln), None)


def test_a_refused_shrink_changes_nothing_and_the_server_still_starts(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = pool.tmp / "box-a.yaml"
    cards(fake, (A100, "80Gi", "GPU-a0"), (A100, "80Gi", "GPU-a1"))
    log = pool.agent("box-a", fake)  # --no-drain is the agent's default
    registered(pool, "box-a", 2)
    first = pool.submit("A100 mem=60Gi")
    held = pool.wait_state(first, "running")["assignments"][0]["devices"][0]["uuid"]

    # both cards now report 40 GiB: less than the 60 GiB the running job holds on one of them
    cards(fake, (A100, "40Gi", "GPU-a0"), (A100, "40Gi", "GPU-a1"))
    refusal = until(
        lambda: refused(log, "409"),
        "the agent's registration refused with 409",
    )

    # nothing changed: the server still serves the 80 GiB cards, with the job's share on its card
    devices = pool.devices("box-a")
    assert {d["memory_mib"] for d in devices.values()} == {81920}
    assert devices[held]["allocated_memory_mib"] == 61440
    assert not any(d["draining"] or d["cordoned"] for d in devices.values())
    second = pool.submit("A100 mem=30Gi")
    other = pool.wait_state(second, "running")["assignments"][0]["devices"][0]["uuid"]
    assert other != held  # 20 GiB left on the held card: the new share went to the other
    for d in pool.devices("box-a").values():
        assert d["allocated_memory_mib"] <= d["memory_mib"], d
        assert d["allocated_core_permille"] <= 1000, d

    pool.restart(monkeypatch)  # the store holds nothing a start refuses
    assert httpx.get(f"{pool.srv.url}/healthz").text == "ok\n"
    assert pool.job(first)["state"] == "running" and pool.job(second)["state"] == "running"
    assert pool.devices("box-a")[held]["allocated_memory_mib"] == 61440
    # the refusal named what was in the way
    assert re.search(rf"allocation \d+ \(job {first}\)", refusal), refusal
    assert f"device {held} shrinks to 40960 MiB" in refusal, refusal
    for job_id in (first, second):
        pool.user.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()


def test_a_device_uuid_of_another_node_is_422_and_changes_nothing(pool: Pool) -> None:
    fake = pool.tmp / "box-c.yaml"
    cards(fake, (A100, "80Gi", "GPU-c0"))
    pool.agent("box-c", fake)
    registered(pool, "box-c", 1)
    # a second host (buggy or hostile) reports the same card
    thief = pool.tmp / "box-thief.yaml"
    cards(thief, (A100, "80Gi", "GPU-c0"))
    log = pool.agent("box-thief", thief)
    refusal = until(
        lambda: refused(log, "422"),
        "the thief's registration refused with 422",
    )
    nodes = pool.admin.get("/v1/nodes")
    assert nodes.status_code == 200, nodes.text
    assert "box-thief" not in {n["name"] for n in nodes.json()}
    sites = pool.user.get("/v1/sites")
    assert sites.status_code == 200, sites.text
    assert pool.admin.get("/v1/nodes/box-thief").status_code == 404
    assert pool.devices("box-c")["GPU-c0-0"]["node"] == "box-c"
    assert '"field":"devices[0].uuid"' in refusal and "already registered by node box-c" in refusal


def test_a_drain_cordons_a_pulled_card_and_drops_it_when_its_job_ends(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = pool.tmp / "box-b.yaml"
    cards(fake, (H100, "80Gi", "GPU-b0"), (H100, "80Gi", "GPU-b1"))
    log = pool.agent("box-b", fake, "--drain")
    registered(pool, "box-b", 2)
    first = pool.submit("H100")
    pulled = pool.wait_state(first, "running")["assignments"][0]["devices"][0]["uuid"]
    kept = "GPU-b1-0" if pulled == "GPU-b0-0" else "GPU-b0-0"

    cards(fake, (H100, "80Gi", kept.removesuffix("-0")))  # the job's card is pulled
    until(lambda: pool.devices("box-b")[pulled]["draining"], "the pulled card draining")
    assert refused(log, "409") is None
    devices = pool.devices("box-b")
    assert devices[pulled]["cordoned"] and devices[pulled]["jobs"] == [first]
    assert not devices[kept]["draining"]
    assert pool.job(first)["state"] == "running"  # its work goes on until it ends

    second = pool.submit("H100")
    assert pool.wait_state(second, "running")["assignments"][0]["devices"][0]["uuid"] == kept
    third = pool.submit("H100")  # no free card but the draining one: it waits
    time.sleep(1)
    assert pool.job(third)["state"] == "pending"

    pool.restart(monkeypatch)  # the drain is stored
    assert pool.devices("box-b")[pulled]["draining"]

    pool.user.post(f"/v1/jobs/{first}/cancel").raise_for_status()
    pool.wait_state(first, "cancelled")
    until(lambda: pulled not in pool.devices("box-b"), "the pulled card dropped")
    assert pool.admin.get("/v1/nodes/box-b").json()["devices"] == 1
    assert pool.job(third)["state"] == "pending"  # the dropped card took no work
    for job_id in (second, third):
        pool.user.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()


def copy_row(
    db: sqlite3.Connection, table: str, value: object, key: str = "id", **changes: object
) -> None:
    """Insert a copy of the ``table`` row whose ``key`` is ``value``, with ``changes``."""
    row = dict(db.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value,)).fetchone())
    row.update(changes)
    marks = ", ".join("?" * len(row))
    db.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", list(row.values()))


def test_a_start_sets_aside_what_the_store_cannot_hold_and_serves_on(tmp_path: Path) -> None:
    srv = ServerProc(tmp_path / "up", cluster=CLUSTER_MIXED)
    srv.start()
    try:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        admin.post("/v1/tenants", json={"name": "t1"}).raise_for_status()
        body = {"tenant": "t1", "command": ["true"], "spec": "H100"}
        r = admin.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        first = r.json()["id"]
        job = until(
            lambda: (j := admin.get(f"/v1/jobs/{first}").json())["assignments"] and j, "placed"
        )
        uuid = job["assignments"][0]["devices"][0]["uuid"]
        node = job["assignments"][0]["node"]
        admin.close()
    finally:
        srv.stop()

    # as a buggy past or a hand edit would leave it: job 2 over-commits job 1's card, job 3 holds
    # a card its node does not have, a later node claims job 1's card too, and one node's row
    # cannot be read at all
    with sqlite3.connect(srv.data / "state.db") as db:
        db.row_factory = sqlite3.Row
        alloc = dict(db.execute("SELECT * FROM allocations WHERE job_id = ?", (first,)).fetchone())
        data = json.loads(alloc["data"])
        for job_id, alloc_id, card in ((first + 1, 900, uuid), (first + 2, 901, f"{uuid}-gone")):
            copy_row(db, "jobs", first, id=job_id, name=f"job-{job_id}", state="running")
            share = {**data["devices"][0], "uuid": card}
            again = {**data, "id": alloc_id, "devices": [share]}
            copy_row(
                db, "allocations", alloc["id"], id=alloc_id, job_id=job_id, data=json.dumps(again)
            )
        copy_row(db, "nodes", node, key="name", name="ghost-dup", registered_at=time.time())
        copy_row(db, "nodes", node, key="name", name="ghost-bad", devices='[{"uuid": 5}]')

    srv.start()  # serves, instead of "Error: allocation 900 over-commits device ..."
    try:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        health = httpx.get(f"{srv.url}/healthz")
        assert health.status_code == 200
        lines = health.text.splitlines()
        assert lines[0] == "ok"
        assert any(f"allocation 900 over-commits device {uuid}" in ln for ln in lines[1:]), lines
        assert any(f"{uuid}-gone" in ln for ln in lines[1:]), lines
        assert any(f"ghost-dup: device {uuid} is node {node}'s too" in ln for ln in lines), lines
        assert any("node ghost-bad cannot be read" in ln for ln in lines), lines
        assert "store inconsistent" in srv.log()
        nodes = {n["name"]: n for n in admin.get("/v1/nodes").json()}
        assert "ghost-bad" not in nodes and nodes["ghost-dup"]["schedulable"] is False

        card = next(d for d in admin.get("/v1/devices").json() if d["uuid"] == uuid)
        assert card["cordoned"] and card["jobs"] == [first]
        assert card["allocated_core_permille"] == 1000  # job 1's, once
        assert admin.get(f"/v1/nodes/{node}").json()["schedulable"] is False
        assert admin.get(f"/v1/jobs/{first}").json()["state"] == "scheduled"
        for job_id in (first + 1, first + 2):
            events = admin.get(f"/v1/jobs/{job_id}").json()["events"]
            assert any(e["state"] == "pending" and "set aside" in e["reason"] for e in events)

        r = admin.post("/v1/jobs", json={"tenant": "t1", "command": ["true"], "spec": "L20"})
        assert r.status_code == 201, r.text
        fresh = r.json()["id"]
        until(lambda: admin.get(f"/v1/jobs/{fresh}").json()["state"] == "scheduled", "placed")
        admin.close()
        srv.stop()
        srv.start()
        health = httpx.get(f"{srv.url}/healthz")
        # the jobs were set aside for good; the node rows stay, reported until the admin acts
        assert health.status_code == 200 and "allocation" not in health.text, health.text
        assert len(health.text.splitlines()) == 3, health.text
    finally:
        srv.stop()
