"""Deleting a node and taking over a cluster-file node: a real ``xpupool up`` and real ``xpupool
agent`` processes on 127.0.0.1 (issue 18, item 1: "only the admin can take over or delete a
cluster-file node").

The admin deletes an idle agent node (gone from the API, its token refused, its agent exits, a
restart keeps it gone); a node running a job is 409 naming the allocation and the job, and nothing
changes; with ``drain=true`` it is cordoned and removed when the job ends; a tenant and an agent
credential are 403. On a server with a cluster file and its in-process agent, a deleted
cluster-file node comes back at the next start (the file declares it), and a node the admin takes
over becomes an agent node that the in-process agent lets go of, and stays one after a restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_node_identity import PROTOCOL, SLEEP, register_body, start_agent

CLUSTER_SIM = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
A100 = "NVIDIA A100-SXM4-80GB"


@dataclass
class Fleet:
    srv: ServerProc
    work: Path
    user_token: str
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        c = httpx.Client(
            base_url=self.srv.url, headers={**self.srv.headers(token), **headers}, timeout=30
        )
        self.clients.append(c)
        return c

    @property
    def admin(self) -> httpx.Client:
        return self.client()

    def agent(self, token: str) -> httpx.Client:
        return self.client(token, **PROTOCOL)

    def bound_token(self, node: str) -> dict[str, Any]:
        r = self.admin.post("/v1/tokens", json={"role": "agent", "node": node})
        assert r.status_code == 201, r.text
        return dict(r.json())

    def node_names(self) -> list[str]:
        return [n["name"] for n in self.admin.get("/v1/nodes").json()]

    def device_nodes(self) -> set[str]:
        return {d["node"] for d in self.admin.get("/v1/devices").json()}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    data = tmp_path_factory.mktemp("deletion")
    srv = ServerProc(data / "server", extra_args=("--heartbeat", "0.3", "--lost-after", "60"))
    srv.start()
    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
    admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
    r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
    r.raise_for_status()
    admin.close()
    f = Fleet(srv, data, str(r.json()["token"]))
    try:
        yield f
    finally:
        for proc in f.agents:
            stop_process(proc)
        for c in f.clients:
            c.close()
        srv.stop()


def _agent(fleet: Fleet, node: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """A real agent for ``node`` (two fake A100s) with a token bound to it, registered."""
    issued = fleet.bound_token(node)
    proc, log = start_agent(fleet.srv.url, node, issued["token"], fleet.work / node)
    fleet.agents.append(proc)
    until(lambda: node in fleet.node_names(), f"{node} registered ({log})")
    return proc, issued


def _job(fleet: Fleet, job_id: int) -> dict[str, Any]:
    return dict(fleet.client(fleet.user_token).get(f"/v1/jobs/{job_id}").json())


def test_an_idle_agent_node_is_deleted_and_its_agent_refused(fleet: Fleet) -> None:
    proc, issued = _agent(fleet, "idle-1")
    r = fleet.admin.delete("/v1/nodes/idle-1")
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] is True and r.json()["tokens_revoked"] == [issued["id"]]
    assert "idle-1" not in fleet.node_names() and "idle-1" not in fleet.device_nodes()
    assert fleet.admin.get("/v1/devices", params={"node": "idle-1"}).status_code == 404
    r = fleet.agent(issued["token"]).post("/v1/agent/heartbeat", json={"node": "idle-1"})
    assert r.status_code == 401, r.text
    assert proc.wait(30) != 0  # the agent is refused (401) and stops, saying why
    rows = fleet.admin.get("/v1/audit", params={"limit": 10_000}).json()
    done = [a for a in rows if a["action"] == "delete_node" and "idle-1" in a["target"]]
    assert done and done[-1]["status"] == 200 and done[-1]["role"] == "admin"


@pytest.fixture(scope="module")
def busy(fleet: Fleet) -> dict[str, Any]:
    """Node ``busy-1`` with a real agent and one job of tenant ``team`` running on it."""
    proc, issued = _agent(fleet, "busy-1")
    r = fleet.client(fleet.user_token).post("/v1/jobs", json={"command": SLEEP, "spec": "A100"})
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    until(lambda: _job(fleet, job_id)["state"] == "running", f"job {job_id} running")
    return {"proc": proc, "token": issued["token"], "job": job_id}


def _view(fleet: Fleet, node: str) -> tuple[Any, ...]:
    """The node and its devices, less what heartbeats move."""
    n = fleet.admin.get(f"/v1/nodes/{node}").json()
    n.pop("last_heartbeat")
    devs = fleet.admin.get("/v1/devices", params={"node": node}).json()
    return n, [{k: v for k, v in d.items() if k != "metrics"} for d in devs]


def test_a_node_running_a_job_is_409_naming_it_and_nothing_changes(
    fleet: Fleet, busy: dict[str, Any]
) -> None:
    before = _view(fleet, "busy-1")
    r = fleet.admin.delete("/v1/nodes/busy-1")
    assert r.status_code == 409, r.text
    reason = r.json()["reason"]
    assert f"(job {busy['job']})" in reason and "allocation" in reason and "drain" in reason
    assert _view(fleet, "busy-1") == before
    assert _job(fleet, busy["job"])["state"] == "running"
    r = fleet.agent(busy["token"]).post("/v1/agent/heartbeat", json={"node": "busy-1"})
    assert r.status_code == 200 and busy["proc"].poll() is None


def test_only_the_admin_deletes_a_node(fleet: Fleet, busy: dict[str, Any]) -> None:
    before = _view(fleet, "busy-1")
    assert fleet.client(fleet.user_token).delete("/v1/nodes/busy-1").status_code == 403
    r = fleet.agent(busy["token"]).delete("/v1/nodes/busy-1?drain=true")
    assert r.status_code == 403, r.text
    assert _view(fleet, "busy-1") == before
    rows = fleet.admin.get("/v1/audit", params={"limit": 10_000}).json()
    refused = [a for a in rows if a["action"] == "delete_node" and a["status"] == 403]
    assert refused and refused[-1]["role"] == "agent" and refused[-1]["node"] == "busy-1"


def test_a_drain_removes_the_node_when_its_job_ends(fleet: Fleet, busy: dict[str, Any]) -> None:
    r = fleet.admin.delete("/v1/nodes/busy-1", params={"drain": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] is False and r.json()["tokens_revoked"] == []
    assert [f"(job {busy['job']})" in w for w in r.json()["waiting_for"]] == [True]
    node = fleet.admin.get("/v1/nodes/busy-1").json()
    assert node["deleting"] is True and node["schedulable"] is False
    user = fleet.client(fleet.user_token)
    blocked = user.post("/v1/jobs", json={"command": ["true"], "spec": "A100"}).json()["id"]
    assert user.post(f"/v1/jobs/{busy['job']}/cancel").status_code == 200
    until(lambda: "busy-1" not in fleet.node_names(), "busy-1 removed after its job ended", 60)
    assert _job(fleet, busy["job"])["state"] == "cancelled"
    assert _job(fleet, blocked)["state"] == "pending"  # it never landed on the draining node
    assert "busy-1" not in fleet.device_nodes()
    r = fleet.agent(busy["token"]).post("/v1/agent/heartbeat", json={"node": "busy-1"})
    assert r.status_code == 401, r.text
    assert busy["proc"].wait(30) != 0
    user.post(f"/v1/jobs/{blocked}/cancel")


def test_the_cli_deletes_a_node(fleet: Fleet) -> None:
    env = {
        **os.environ,
        "XPUPOOL_URL": fleet.srv.url,
        "XPUPOOL_TOKEN": fleet.srv.admin_token,
        "HOME": str(fleet.work),
    }
    for name in ("cli-1", "cli-2"):
        token = fleet.bound_token(name)["token"]
        body = register_body(name, [f"GPU-{name}-0"])
        assert fleet.agent(token).post("/v1/agent/register", json=body).status_code == 200

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)

    out = cli("node", "delete", "cli-1")
    assert out.returncode == 0, out.stderr
    assert "node cli-1 deleted; tokens revoked: " in out.stdout
    out = cli("node", "delete", "cli-2", "--drain", "-o", "json")  # nothing held: gone at once
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deleted"] is True
    out = cli("node", "delete", "cli-1")
    assert out.returncode != 0 and "cli-1" in out.stderr + out.stdout
    assert {"cli-1", "cli-2"}.isdisjoint(fleet.node_names())


def test_a_restart_keeps_deleted_nodes_gone(fleet: Fleet) -> None:
    kept = fleet.bound_token("kept-1")
    body = register_body("kept-1", ["GPU-kept-0"])
    assert fleet.agent(kept["token"]).post("/v1/agent/register", json=body).status_code == 200
    fleet.srv.stop()
    fleet.srv.start()
    names = fleet.node_names()
    assert "kept-1" in names
    assert {"idle-1", "busy-1", "cli-1", "cli-2"}.isdisjoint(names)
    tokens = {t["node"]: t for t in fleet.admin.get("/v1/tokens").json() if t["node"]}
    assert tokens["idle-1"]["revoked"] and tokens["busy-1"]["revoked"]
    assert not tokens["kept-1"]["revoked"]


def test_cluster_file_nodes_deleted_come_back_and_taken_over_stay_agent_nodes(
    tmp_path: Path,
) -> None:
    """With the in-process agent: deleting ``sim-910b`` and taking over ``sim-a100`` make it let
    go of both (no more heartbeats from it); a restart with the same cluster file registers
    ``sim-910b`` again (the file declares it) and leaves the taken-over ``sim-a100`` an agent
    node with the devices the admin registered."""
    srv = ServerProc(
        tmp_path / "data",
        cluster=CLUSTER_SIM,
        agent=True,
        extra_args=("--heartbeat", "0.3", "--lost-after", "3"),
    )
    with srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)

        def node(name: str) -> dict[str, Any]:
            return dict(admin.get(f"/v1/nodes/{name}").json())

        until(lambda: node("sim-a100")["last_heartbeat"], "the in-process agent's heartbeat")
        r = admin.delete("/v1/nodes/sim-910b")
        assert r.status_code == 200, r.text
        assert "cluster file" in r.json()["note"] and "registers it again" in r.json()["note"]
        assert admin.get("/v1/nodes/sim-910b").status_code == 404
        until(lambda: "sim-910b" in srv.log() and "hosting it no more" in srv.log(), "let go")
        seen = node("sim-a100")["last_heartbeat"]
        until(lambda: node("sim-a100")["last_heartbeat"] != seen, "sim-a100 still heartbeats")

        taken = register_body("sim-a100", ["GPU-taken-0", "GPU-taken-1"], model=A100)
        r = admin.post("/v1/agent/register", json=taken)
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "agent"
        # nobody heartbeats for it now: it is lost as any silent agent node is
        until(lambda: node("sim-a100")["status"] == "lost", "sim-a100 lost", 30)
        issued = admin.post("/v1/tokens", json={"role": "agent", "node": "sim-a100"}).json()
        own = httpx.Client(
            base_url=srv.url, headers={**srv.headers(issued["token"]), **PROTOCOL}, timeout=30
        )
        assert own.post("/v1/agent/register", json=taken).status_code == 200
        assert own.post("/v1/agent/heartbeat", json={"node": "sim-a100"}).status_code == 200
        assert node("sim-a100")["status"] == "ready"
        own.close()
        admin.close()

        srv.stop()
        srv.start()
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        back = node("sim-910b")
        assert back["source"] == "cluster" and back["devices"] == 8
        assert "cluster file: registered sim-910b" in srv.log()
        kept = node("sim-a100")
        assert kept["source"] == "agent"
        uuids = sorted(d["uuid"] for d in admin.get("/v1/devices?node=sim-a100").json())
        assert uuids == ["GPU-taken-0", "GPU-taken-1"]
        hosting = [line for line in srv.log().splitlines() if "agent: in-process, hosting" in line]
        assert "sim-910b" in hosting[-1] and "sim-a100" not in hosting[-1]
        admin.close()
