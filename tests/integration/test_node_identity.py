"""Agent credentials speak for one node: a real ``xpupool up`` and real ``xpupool agent`` processes
on 127.0.0.1 (issue 18, items 1).

A hostile holder of an agent credential tries what issue 18 found: heartbeat as another node (and
receive its jobs' env), report another node's job finished, re-register another node or a
cluster-file node with invented cards, append to another node's job log, send metrics for devices
its node does not have. Each is refused with a status naming the node the credential is bound to,
and the test checks that nothing changed: the job's state, the node's devices, the log. The
bootstrap flow, expiry, the audit log and the protocol version are checked on the same server.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import CLUSTER_MIXED, ServerProc, stop_process, until

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
PROTOCOL = {"X-Xpupool-Agent-Protocol": "2"}
SLEEP = [JOB_PYTHON, "-c", "import time; print('sleeping', flush=True); time.sleep(120)"]
SECRET = "s3cr3t-value"


def start_agent(
    url: str,
    node: str,
    token: str,
    work: Path,
    *,
    launcher: list[str] = CLI,
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], Path]:
    """A real ``xpupool agent`` for ``node`` with two fake A100s of its own (UUIDs
    ``GPU-<node>-0/1``: a UUID names one device in the pool); output goes to ``work/agent.log``
    (appended, so a restarted agent's lines follow the first one's)."""
    work.mkdir(parents=True, exist_ok=True)
    fake = work / "fake.yaml"
    fake.write_text(
        FAKE.read_text().replace("uuid_prefix: GPU-fake-a100", f"uuid_prefix: GPU-{node}")
    )
    log = work / "agent.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                *launcher,
                "agent",
                "--server",
                url,
                "--node",
                node,
                "--fake",
                str(fake),
                "--grace",
                "1",
                "--poll",
                "0.05",
                "--work-dir",
                str(work),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": token},
        )
    return proc, log


@dataclass
class Pool:
    srv: ServerProc
    admin: httpx.Client
    user: httpx.Client
    work: Path
    agents: list[subprocess.Popen[bytes]]

    def as_(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.srv.url,
            headers={"Authorization": f"Bearer {token}", **PROTOCOL},
            timeout=30,
        )

    def agent_token(self, **body: Any) -> dict[str, Any]:
        """A token from ``POST /v1/tokens`` (agent tokens are not issued under a tenant)."""
        r = self.admin.post("/v1/tokens", json={"role": "agent", **body})
        assert r.status_code == 201, r.text
        return dict(r.json())

    def tenant_agent_token(self) -> str:
        """An agent token issued the pre-upgrade way, under a tenant and bound to no node."""
        r = self.admin.post("/v1/tenants/team/tokens", json={"role": "agent"})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.user.get(f"/v1/jobs/{job_id}")
        r.raise_for_status()
        return dict(r.json())

    def devices(self, node: str) -> list[dict[str, Any]]:
        r = self.admin.get("/v1/devices", params={"node": node})
        r.raise_for_status()
        return list(r.json())

    def audit(self, **params: Any) -> list[dict[str, Any]]:
        r = self.admin.get("/v1/audit", params={"limit": 10_000, **params})
        assert r.status_code == 200, r.text
        return list(r.json())


def register_body(
    name: str, uuids: list[str], model: str = "NVIDIA H100 80GB HBM3"
) -> dict[str, Any]:
    return {
        "name": name,
        "cpu_milli": 64_000,
        "memory_mib": 1 << 18,
        "devices": [
            {"uuid": u, "vendor": "nvidia", "model": model, "memory_mib": 81559, "index": i}
            for i, u in enumerate(uuids)
        ],
    }


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    data = tmp_path_factory.mktemp("identity")
    srv = ServerProc(
        data / "server",
        cluster=CLUSTER_MIXED,
        extra_args=("--heartbeat", "0.3", "--lost-after", "60"),
    )
    srv.start()
    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
    admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
    r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
    r.raise_for_status()
    user = httpx.Client(base_url=srv.url, headers=srv.headers(r.json()["token"]), timeout=30)
    p = Pool(srv, admin, user, data, [])
    try:
        yield p
    finally:
        for proc in p.agents:
            stop_process(proc)
        admin.close()
        user.close()
        srv.stop()


@pytest.fixture(scope="module")
def victim(pool: Pool) -> dict[str, Any]:
    """Node ``box-b`` run by a real agent with a tenant-issued agent token, and a job of tenant
    ``team`` running on it with a secret in its env."""
    token = pool.tenant_agent_token()
    proc, log = start_agent(pool.srv.url, "box-b", token, pool.work / "box-b")
    pool.agents.append(proc)
    until(lambda: pool.admin.get("/v1/nodes/box-b").status_code == 200, "box-b registered")
    r = pool.user.post(
        "/v1/jobs",
        json={
            "command": SLEEP,
            "spec": "A100",
            "env": {"API_KEY": SECRET},
        },
    )
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    until(lambda: pool.job(job_id)["state"] == "running", f"job {job_id} running ({log})")
    until(lambda: "sleeping" in pool.user.get(f"/v1/jobs/{job_id}/logs").text, "the job's log")
    return {"job": job_id, "token": token, "log": log}


@pytest.fixture(scope="module")
def evil(pool: Pool) -> httpx.Client:
    """An agent credential issued under a tenant (the pre-upgrade way), first used for its own
    node ``evil`` (one fake card): from then on it speaks for ``evil`` only."""
    client = pool.as_(pool.tenant_agent_token())
    r = client.post("/v1/agent/register", json=register_body("evil", ["GPU-evil-0"]))
    assert r.status_code == 200, r.text
    return client


def _reason(r: httpx.Response) -> str:
    return str(r.json().get("reason", ""))


def test_heartbeat_as_another_node_is_403_and_leaks_no_env(
    pool: Pool, victim: dict[str, Any], evil: httpx.Client
) -> None:
    r = evil.post("/v1/agent/heartbeat", json={"node": "box-b"})
    assert r.status_code == 403, r.text
    assert "evil" in _reason(r) and "box-b" in _reason(r)
    assert SECRET not in r.text


def test_reporting_another_nodes_job_finished_changes_nothing(
    pool: Pool, victim: dict[str, Any], evil: httpx.Client
) -> None:
    job_id = victim["job"]
    report = {"job_id": job_id, "replica": 0, "state": "succeeded", "exit_code": 0}
    r = evil.post("/v1/agent/heartbeat", json={"node": "box-b", "replicas": [report]})
    assert r.status_code == 403, r.text
    # as its own node the report is for a replica this node does not hold: ignored, recorded
    r = evil.post("/v1/agent/heartbeat", json={"node": "evil", "replicas": [report]})
    assert r.status_code == 200, r.text
    time.sleep(1.0)  # let the scheduler and the real agent act on whatever changed
    assert pool.job(job_id)["state"] == "running"
    ignored = [a for a in pool.audit() if a["action"] == "report_ignored"]
    assert any(str(job_id) in a["result"] and a["node"] == "evil" for a in ignored), ignored


def test_re_registering_another_node_is_403_and_keeps_its_devices(
    pool: Pool, victim: dict[str, Any], evil: httpx.Client
) -> None:
    before = sorted(d["uuid"] for d in pool.devices("box-b"))
    fake = register_body("box-b", ["GPU-forged-0", "GPU-forged-1"])
    r = evil.post("/v1/agent/register", json=fake)
    assert r.status_code == 403, r.text
    assert "evil" in _reason(r)
    assert sorted(d["uuid"] for d in pool.devices("box-b")) == before
    assert pool.job(victim["job"])["state"] == "running"


def test_log_upload_for_another_nodes_replica_is_403_and_appends_nothing(
    pool: Pool, victim: dict[str, Any], evil: httpx.Client
) -> None:
    job_id = victim["job"]
    before = pool.user.get(f"/v1/jobs/{job_id}/logs").content
    r = evil.post(
        f"/v1/agent/nodes/box-b/jobs/{job_id}/replicas/0/logs",
        content=b"forged line\n",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 403, r.text
    assert "evil" in _reason(r)
    assert b"forged" not in pool.user.get(f"/v1/jobs/{job_id}/logs").content
    assert pool.user.get(f"/v1/jobs/{job_id}/logs").content.startswith(before)


def test_metrics_for_devices_the_node_did_not_register_are_422_and_not_stored(
    pool: Pool, evil: httpx.Client
) -> None:
    metrics = [
        {"uuid": "GPU-evil-0", "memory_used_mib": 4321},
        {"uuid": "GPU-invented-7", "memory_used_mib": 1},
    ]
    r = evil.post("/v1/agent/heartbeat", json={"node": "evil", "metrics": metrics})
    assert r.status_code == 422, r.text
    assert "GPU-invented-7" in r.text and r.json()["field"] == "metrics[1].uuid"
    # a refused heartbeat stores nothing, not even the valid reading beside the bad one
    assert pool.devices("evil")[0]["metrics"] is None
    assert "GPU-invented-7" not in pool.admin.get("/metrics").text


def test_a_node_bound_token_speaks_for_its_node_only(pool: Pool, victim: dict[str, Any]) -> None:
    issued = pool.agent_token(node="bound-1", name="rack 4")
    assert issued["node"] == "bound-1" and issued["role"] == "agent" and issued["tenant"] is None
    client = pool.as_(issued["token"])
    r = client.post("/v1/agent/register", json=register_body("box-b", ["GPU-x"]))
    assert r.status_code == 403 and "bound-1" in _reason(r), r.text
    r = client.post("/v1/agent/register", json=register_body("bound-1", ["GPU-bound-0"]))
    assert r.status_code == 200, r.text
    r = client.post("/v1/agent/heartbeat", json={"node": "bound-1"})
    assert r.status_code == 200, r.text
    r = client.post("/v1/agent/heartbeat", json={"node": "box-b"})
    assert r.status_code == 403 and "bound-1" in _reason(r), r.text
    # a bound token is still only an agent credential
    assert client.get("/v1/jobs").status_code == 403


def test_a_tenant_issued_agent_token_binds_to_the_first_node_it_uses(pool: Pool) -> None:
    client = pool.as_(pool.tenant_agent_token())
    r = client.post("/v1/agent/register", json=register_body("first-1", ["GPU-first-0"]))
    assert r.status_code == 200, r.text
    r = client.post("/v1/agent/register", json=register_body("second-1", ["GPU-second-0"]))
    assert r.status_code == 403 and "first-1" in _reason(r), r.text
    assert pool.admin.get("/v1/nodes/second-1").status_code == 404
    listed = {t["id"]: t for t in pool.admin.get("/v1/tokens").json()}
    assert "first-1" in [t["node"] for t in listed.values()]


def test_an_unbound_token_cannot_claim_a_node_another_credential_holds(
    pool: Pool, victim: dict[str, Any]
) -> None:
    client = pool.as_(pool.tenant_agent_token())
    r = client.post("/v1/agent/heartbeat", json={"node": "box-b"})
    assert r.status_code == 403, r.text
    r = client.post("/v1/agent/register", json=register_body("box-b", ["GPU-y"]))
    assert r.status_code == 403, r.text


def test_an_agent_cannot_take_over_a_cluster_file_node(pool: Pool) -> None:
    before = pool.devices("bj-a100-0")
    for token in (pool.tenant_agent_token(), pool.agent_token(node="bj-a100-0")["token"]):
        r = pool.as_(token).post(
            "/v1/agent/register", json=register_body("bj-a100-0", ["GPU-fake-h100-0"])
        )
        assert r.status_code == 403, r.text
        assert "cluster" in _reason(r)
    assert pool.devices("bj-a100-0") == before


def test_tokens_expire(pool: Pool) -> None:
    issued = pool.agent_token(node="short-1", expires_in_s=2)
    assert issued["expires_at"] is not None
    client = pool.as_(issued["token"])
    r = client.post("/v1/agent/register", json=register_body("short-1", ["GPU-short-0"]))
    assert r.status_code == 200, r.text
    until(
        lambda: client.post("/v1/agent/heartbeat", json={"node": "short-1"}).status_code == 401,
        "the token to expire",
        20,
    )
    r = client.post("/v1/agent/heartbeat", json={"node": "short-1"})
    assert r.status_code == 401 and "expired" in _reason(r)
    r = pool.admin.post("/v1/tokens", json={"role": "agent", "node": "x", "expires_at": 1.0})
    assert r.status_code == 422 and r.json()["field"] == "expires_at", r.text


def test_agent_protocol_version_mismatch_is_refused_naming_both(pool: Pool) -> None:
    token = pool.agent_token(node="old-1")["token"]
    for sent in ("1", "3"):
        r = httpx.post(
            f"{pool.srv.url}/v1/agent/register",
            json=register_body("old-1", ["GPU-old-0"]),
            headers={"Authorization": f"Bearer {token}", "X-Xpupool-Agent-Protocol": sent},
        )
        assert r.status_code == 426, r.text
        assert f"agent protocol {sent}" in _reason(r) and "2" in _reason(r)
    r = httpx.post(
        f"{pool.srv.url}/v1/agent/register",
        json=register_body("old-1", ["GPU-old-0"]),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 426 and "no X-Xpupool-Agent-Protocol header" in _reason(r), r.text
    assert pool.admin.get("/v1/nodes/old-1").status_code == 404


def test_an_agent_of_another_protocol_exits_with_both_versions(pool: Pool) -> None:
    token = pool.agent_token(node="future-1")["token"]
    patched = [
        sys.executable,
        "-c",
        "import xpupool.server.schemas.agent_protocol as s; s.AGENT_PROTOCOL = 99; "
        "from xpupool.cli import main; main()",
    ]
    proc, log = start_agent(
        pool.srv.url, "future-1", token, pool.work / "future-1", launcher=patched
    )
    pool.agents.append(proc)
    code = proc.wait(60)
    out = log.read_text()
    assert code != 0, out
    assert "agent protocol 99" in out and "protocol 2" in out, out
    assert pool.admin.get("/v1/nodes/future-1").status_code == 404


def test_bootstrap_token_registers_one_node_and_the_agent_keeps_its_node_token(
    pool: Pool,
) -> None:
    boot = pool.agent_token(bootstrap=True, expires_in_s=3600)
    assert boot["role"] == "bootstrap" and boot["token"]
    work = pool.work / "boot-1"
    proc, log = start_agent(pool.srv.url, "boot-1", boot["token"], work)
    pool.agents.append(proc)
    until(
        lambda: pool.admin.get("/v1/nodes/boot-1").status_code == 200,
        f"boot-1 registered ({log.read_text()[-2000:] if log.exists() else ''})",
    )
    stored = work / "node-token"
    # the server commits the node before it answers; the agent writes the token when answered
    until(stored.exists, "the node token stored by the agent")
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    node_token = stored.read_text().strip()
    assert node_token and node_token != boot["token"]
    tokens = {t["id"]: t for t in pool.admin.get("/v1/tokens").json()}
    assert tokens[boot["id"]]["revoked"] is True and tokens[boot["id"]]["node"] == "boot-1"
    assert any(t["node"] == "boot-1" and t["role"] == "agent" for t in tokens.values())
    first = pool.admin.get("/v1/nodes/boot-1").json()["last_heartbeat"]
    until(
        lambda: pool.admin.get("/v1/nodes/boot-1").json()["last_heartbeat"] != first,
        "a heartbeat with the node token",
    )
    # the bootstrap token is spent: a second node cannot use it
    r = pool.as_(boot["token"]).post(
        "/v1/agent/register", json=register_body("boot-2", ["GPU-boot2-0"])
    )
    assert r.status_code == 401, r.text
    assert pool.admin.get("/v1/nodes/boot-2").status_code == 404
    # the node token is bound to boot-1
    r = pool.as_(node_token).post("/v1/agent/heartbeat", json={"node": "box-b"})
    assert r.status_code == 403 and "boot-1" in _reason(r)
    # restarted with the same (spent) bootstrap token, the agent uses its stored node token
    stop_process(proc)
    proc, log = start_agent(pool.srv.url, "boot-1", boot["token"], work)
    pool.agents.append(proc)
    after = pool.admin.get("/v1/nodes/boot-1").json()["last_heartbeat"]
    until(
        lambda: pool.admin.get("/v1/nodes/boot-1").json()["last_heartbeat"] != after,
        f"the restarted agent's heartbeat ({log.read_text()[-2000:]})",
    )
    assert proc.poll() is None
    # a new agent with the spent bootstrap token and no stored token stops with a clear error
    lost, lost_log = start_agent(pool.srv.url, "boot-3", boot["token"], pool.work / "boot-3")
    pool.agents.append(lost)
    assert lost.wait(60) != 0
    assert "401" in lost_log.read_text() and "boot-3" not in [
        n["name"] for n in pool.admin.get("/v1/nodes").json()
    ]


def test_a_bootstrap_token_cannot_register_an_existing_node(
    pool: Pool, victim: dict[str, Any]
) -> None:
    boot = pool.agent_token(bootstrap=True)
    before = sorted(d["uuid"] for d in pool.devices("box-b"))
    r = pool.as_(boot["token"]).post(
        "/v1/agent/register", json=register_body("box-b", ["GPU-hijack-0"])
    )
    assert r.status_code == 403, r.text
    assert sorted(d["uuid"] for d in pool.devices("box-b")) == before
    # not spent by the refusal: it still registers a new node
    r = pool.as_(boot["token"]).post(
        "/v1/agent/register", json=register_body("fresh-1", ["GPU-fresh-0"])
    )
    assert r.status_code == 200, r.text
    assert str(r.json()["token"]).startswith("xpp_")
    # a bootstrap token speaks no other part of the protocol, and no user endpoint
    other = pool.agent_token(bootstrap=True)["token"]
    assert pool.as_(other).post("/v1/agent/heartbeat", json={"node": "fresh-1"}).status_code == 403
    assert pool.as_(other).get("/v1/jobs").status_code == 403


def test_audit_log_records_admin_and_agent_actions(
    pool: Pool, victim: dict[str, Any], evil: httpx.Client
) -> None:
    since = time.time() - 1
    issued = pool.agent_token(node="audited-1")
    assert pool.admin.delete(f"/v1/tokens/{issued['id']}").status_code == 204
    assert pool.admin.post("/v1/tenants", json={"name": "audited"}).status_code == 201
    queue = {"name": "audited", "tenant": "audited", "quotas": []}
    assert pool.admin.put("/v1/queues/audited", json=queue).status_code == 200
    assert pool.admin.post("/v1/nodes/sh-l20-0/cordon").status_code == 200
    assert evil.post("/v1/agent/heartbeat", json={"node": "box-b"}).status_code == 403
    rows = pool.audit(since=since)
    assert all(r["at"] >= since for r in rows)
    by_action: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_action.setdefault(row["action"], []).append(row)
    assert by_action["issue_agent_token"][0]["role"] == "admin"
    assert by_action["issue_agent_token"][0]["result"] == "ok"
    assert str(issued["id"]) in by_action["revoke_token"][0]["target"]
    assert by_action["create_tenant"][0]["result"] == "ok"
    assert "audited" in by_action["put_queue"][0]["target"]
    assert "sh-l20-0" in by_action["cordon_node"][0]["target"]
    refused = [r for r in by_action["heartbeat"] if r["status"] == 403 and r["node"] == "evil"]
    assert refused and refused[0]["role"] == "agent" and "box-b" in refused[0]["result"]
    # registrations and bootstrap exchanges of the earlier tests are there; heartbeats are
    # counted, not written one row each
    everything = pool.audit()
    assert any(r["action"] == "register" and r["status"] == 200 for r in everything)
    ok_heartbeats = [r for r in everything if r["action"] == "heartbeat" and r["status"] == 200]
    assert ok_heartbeats == []
    assert "xpupool_agent_heartbeats_total{" in pool.admin.get("/metrics").text
    # the admin cancelling a tenant's job is recorded with the job id
    r = pool.user.post("/v1/jobs", json={"command": SLEEP, "spec": "L20"})
    job_id = r.json()["id"]
    assert pool.admin.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    cancels = [r for r in pool.audit(since=since) if r["action"] == "cancel"]
    assert cancels and str(job_id) in cancels[-1]["target"]
    # the limit keeps the newest rows, oldest first
    two = pool.audit(since=since, limit=2)
    assert len(two) == 2 and two[-1]["id"] == max(r["id"] for r in pool.audit(since=since))
    # only the admin reads it
    assert pool.user.get("/v1/audit").status_code == 403


def test_audit_cli(pool: Pool) -> None:
    env = {
        **os.environ,
        "XPUPOOL_URL": pool.srv.url,
        "XPUPOOL_TOKEN": pool.srv.admin_token,
        "HOME": str(pool.work),
        "COLUMNS": "250",
    }
    out = subprocess.run(
        [*CLI, "audit", "--since", "1h", "-o", "json"], env=env, capture_output=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    import json

    rows = json.loads(out.stdout)
    assert rows and {"at", "role", "action", "target", "status", "result"} <= set(rows[0])
    table = subprocess.run([*CLI, "audit"], env=env, capture_output=True, timeout=60)
    assert table.returncode == 0 and b"create_tenant" in table.stdout


def test_the_token_cli_issues_bound_and_bootstrap_tokens(pool: Pool) -> None:
    import json

    env = {
        **os.environ,
        "XPUPOOL_URL": pool.srv.url,
        "XPUPOOL_TOKEN": pool.srv.admin_token,
        "HOME": str(pool.work),
    }

    def cli(*args: str) -> dict[str, Any]:
        out = subprocess.run([*CLI, *args], env=env, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    bound = cli("token", "issue", "--agent", "--node", "cli-1", "--expires", "1h", "-o", "json")
    assert bound["node"] == "cli-1" and bound["role"] == "agent"
    assert 3000 < bound["expires_at"] - time.time() <= 3600
    boot = cli("token", "issue", "--agent", "--bootstrap", "-o", "json")
    assert boot["role"] == "bootstrap" and boot["token"].startswith("xpb_")
    bad = subprocess.run(
        [*CLI, "token", "issue", "--agent", "--node", "x", "--expires", "soon"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode != 0 and b"--expires" in bad.stderr + bad.stdout


CLUSTER_SIM = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"


def test_a_cluster_file_node_keeps_its_devices_across_a_restart(tmp_path: Path) -> None:
    """The agent's refused takeover leaves nothing behind: after a restart the cluster file's
    node has its own cards (issue 18: its 8 A100s left the pool)."""
    with ServerProc(tmp_path / "data", cluster=CLUSTER_SIM) as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        admin.post("/v1/tenants", json={"name": "t"}).raise_for_status()
        token = admin.post("/v1/tenants/t/tokens", json={"role": "agent"}).json()["token"]
        before = sorted(d["uuid"] for d in admin.get("/v1/devices?node=sim-a100").json())
        r = httpx.post(
            f"{srv.url}/v1/agent/register",
            json=register_body("sim-a100", ["GPU-taken-0"]),
            headers={"Authorization": f"Bearer {token}", **PROTOCOL},
        )
        assert r.status_code == 403, r.text
        srv.stop()
        srv.start()
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        node = admin.get("/v1/nodes/sim-a100").json()
        assert node["source"] == "cluster" and node["devices"] == 4
        after = sorted(d["uuid"] for d in admin.get("/v1/devices?node=sim-a100").json())
        assert after == before


def test_the_server_keeps_the_last_cap_of_a_replica_log(tmp_path: Path) -> None:
    """``--log-cap``: the server keeps a replica's last MiB (log_rotation.py), a reader from 0
    starting at the oldest byte kept and told how many bytes it skipped."""
    with ServerProc(tmp_path / "data", extra_args=("--log-cap", "1Mi")) as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        admin.post("/v1/tenants", json={"name": "t"}).raise_for_status()
        user_token = admin.post("/v1/tenants/t/tokens", json={}).json()["token"]
        issued = admin.post("/v1/tokens", json={"role": "agent", "node": "logs-1"})
        assert issued.status_code == 201, issued.text
        agent = httpx.Client(
            base_url=srv.url,
            headers={"Authorization": f"Bearer {issued.json()['token']}", **PROTOCOL},
            timeout=30,
        )
        body = register_body("logs-1", ["GPU-logs-0"], model="NVIDIA L20")
        assert agent.post("/v1/agent/register", json=body).status_code == 200
        user = httpx.Client(base_url=srv.url, headers=srv.headers(user_token), timeout=30)
        job_id = user.post("/v1/jobs", json={"command": ["true"], "spec": "L20"}).json()["id"]
        until(lambda: user.get(f"/v1/jobs/{job_id}").json()["state"] == "scheduled", "placed")
        mib = b"x" * (1 << 20)
        for _ in range(3):
            r = agent.post(f"/v1/agent/nodes/logs-1/jobs/{job_id}/replicas/0/logs", content=mib)
            assert r.status_code == 204, r.text
        end = agent.post(f"/v1/agent/nodes/logs-1/jobs/{job_id}/replicas/0/logs", content=b"end\n")
        assert end.status_code == 204, end.text
        r = user.get(f"/v1/jobs/{job_id}/logs")
        skipped = int(r.headers["X-Xpupool-Log-Skipped"])
        assert r.content.endswith(b"x" * 1000 + b"end\n") and len(r.content) <= 1 << 20
        assert skipped >= 2 << 20 and skipped + len(r.content) == 3 * (1 << 20) + 4


def test_an_agent_token_from_before_the_upgrade_binds_to_the_first_node_it_uses(
    tmp_path: Path,
) -> None:
    """Upgrade notes (docs/security.md): the database of the release before node binding has
    tokens without ``node`` and ``expires_at`` and no audit table; the server adds them on start,
    and an agent token from then works for the first node it registers or heartbeats as."""
    import sqlite3

    srv = ServerProc(tmp_path / "data")
    with srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        admin.post("/v1/tenants", json={"name": "t"}).raise_for_status()
        old = admin.post("/v1/tenants/t/tokens", json={"role": "agent"}).json()["token"]
    db = sqlite3.connect(tmp_path / "data" / "state.db")
    for ddl in (
        "ALTER TABLE tokens DROP COLUMN node",
        "ALTER TABLE tokens DROP COLUMN expires_at",
        "DROP TABLE audit",
    ):
        db.execute(ddl)
    db.commit()
    db.close()
    with srv:
        agent = httpx.Client(
            base_url=srv.url, headers={"Authorization": f"Bearer {old}", **PROTOCOL}, timeout=30
        )
        r = agent.post("/v1/agent/register", json=register_body("old-a", ["GPU-old-a"]))
        assert r.status_code == 200, r.text
        r = agent.post("/v1/agent/register", json=register_body("old-b", ["GPU-old-b"]))
        assert r.status_code == 403 and "old-a" in _reason(r), r.text
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        listed = admin.get("/v1/tokens").json()
        assert [t["node"] for t in listed if t["role"] == "agent"] == ["old-a"]
        binds = [a for a in admin.get("/v1/audit").json() if a["action"] == "bind_token"]
        assert len(binds) == 1 and binds[0]["node"] == "old-a"
