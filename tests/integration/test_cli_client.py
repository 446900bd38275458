"""The client commands against a real server: uvicorn on 127.0.0.1 in a thread, a real SQLite file,
the two-site example pool, the scheduler loop running; the CLI driven through click's runner.

One server per module (starting one costs ~1 s); each test makes its own tenant so tests stay
independent of order.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner, Result

from xpupool.cli import main
from xpupool.server.app import create_app
from xpupool.server.plane import ControlPlane
from xpupool.server.up import UpConfig, admin_token_path, open_plane

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster-mixed.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Plane:
    url: str
    admin: str
    data: Path
    home: Path
    plane: ControlPlane

    def cli(self, *args: str, token: str | None = None, url: str | None = None) -> Result:
        """Run ``xpupool ARGS`` with the admin token unless ``token`` is given; HOME points at an
        empty folder so no user config leaks in."""
        env = {
            "XPUPOOL_URL": url or self.url,
            "XPUPOOL_TOKEN": token or self.admin,
            "HOME": str(self.home),
            "XPUPOOL_CONFIG": None,
            "COLUMNS": "200",
        }
        return CliRunner().invoke(main, list(args), env=env)  # type: ignore[arg-type]

    def ok(self, *args: str, token: str | None = None) -> Result:
        result = self.cli(*args, token=token)
        assert result.exit_code == 0, result.output
        return result

    def json(self, *args: str, token: str | None = None) -> Any:
        """``-o json`` goes before ``--``: what follows it is the job's own argv."""
        at = args.index("--") if "--" in args else len(args)
        return json.loads(self.ok(*args[:at], "-o", "json", *args[at:], token=token).stdout)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    """A server with the example pool; no agent, so placed jobs stay 'scheduled'."""
    root = tmp_path_factory.mktemp("cli")
    data = root / ".xpupool"
    plane = open_plane(UpConfig(data=data, cluster=CLUSTER, agent=False))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(plane), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    home = root / "home"
    home.mkdir()
    admin = admin_token_path(data).read_text().strip()
    yield Plane(f"http://127.0.0.1:{port}", admin, data, home, plane)
    server.should_exit = True
    thread.join(10)


def _tenant(srv: Plane, name: str) -> str:
    """Create tenant ``name`` and return a tenant token for it."""
    assert "created" in srv.ok("tenant", "create", name, "--weight", "2").stdout
    issued = srv.json("token", "issue", name, "--name", "ci")
    assert issued["role"] == "tenant" and issued["tenant"] == name
    return str(issued["token"])


def _poll(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_token_issue_prints_the_export_line(srv: Plane) -> None:
    srv.ok("tenant", "create", "exported")
    lines = srv.ok("token", "issue", "exported").stdout.strip().splitlines()
    assert lines[-1].startswith("export XPUPOOL_TOKEN=")
    token = lines[-1].removeprefix("export XPUPOOL_TOKEN=")
    assert srv.json("jobs", token=token) == []  # the printed token acts as the tenant


def test_the_printed_api_url_works_as_url(srv: Plane) -> None:
    result = srv.cli("nodes", "-o", "json", url=f"{srv.url}/v1")  # as `xpupool up` prints it
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_submit_list_detail_cancel(srv: Plane) -> None:
    token = _tenant(srv, "lab")
    submitted = srv.json(
        "submit", "A100 mem=20Gi", "--name", "train", "--env", "EPOCHS=3", "--wait",
        "--", "python", "train.py", "-o", "x",
        token=token,
    )  # fmt: skip
    assert submitted["state"] == "scheduled"
    assert submitted["command"] == ["python", "train.py", "-o", "x"]
    assert submitted["env"] == {"EPOCHS": "3"}
    job_id = submitted["id"]
    listed = srv.json("jobs", "--state", "scheduled", token=token)
    assert [j["id"] for j in listed] == [job_id]
    assert srv.json("jobs", "--tenant", "lab")[0]["tenant"] == "lab"  # admin filter
    table = srv.ok("jobs", token=token).stdout
    assert "train" in table and "scheduled" in table
    detail = srv.ok("job", str(job_id), token=token).stdout
    for text in ("assignments", "events", "A100", "submitted", "EPOCHS=3"):
        assert text in detail
    assert (
        srv.json("job", str(job_id), token=token)["assignments"][0]["devices"][0]["memory_mib"]
        == 20 * 1024
    )
    assert "cancelled" in srv.ok("cancel", str(job_id), token=token).stdout
    assert srv.json("job", str(job_id), token=token)["state"] == "cancelled"
    again = srv.cli("cancel", str(job_id), token=token)
    assert again.exit_code == 1 and "already cancelled" in again.output


def test_quota_keeps_a_larger_job_pending_with_the_reason(srv: Plane, tmp_path: Path) -> None:
    token = _tenant(srv, "team")
    queue_file = tmp_path / "queue.yaml"
    queue_file.write_text(
        "name: team\ntenant: team\nquotas:\n  - {flavor: A100, resource: devices, nominal: 2}\n"
    )
    put = srv.json("queue", "put", "-f", str(queue_file))
    assert put["quotas"][0]["nominal"] == 2
    # above what the queue can ever hold: refused, naming the queue and the arithmetic
    refused = srv.cli("submit", "A100:4", "--", "sleep", "1", token=token)
    assert refused.exit_code != 0
    assert "queue" in refused.output and "4 asked > 2 nominal" in refused.output
    first = srv.json("submit", "A100:2", "--", "sleep", "1", token=token)["id"]
    job_id = srv.json("submit", "A100:2", "--", "sleep", "1", token=token)["id"]
    _poll(lambda: "quota" in srv.json("job", str(job_id), token=token)["reason"])
    detail = srv.ok("job", str(job_id), token=token).stdout
    assert "pending reason" in detail and "quota" in detail
    queue = srv.json("queue", "show", "team", token=token)
    assert queue["pending"] == 1
    # the flag form replaces the quota; the job then fits
    srv.ok("queue", "put", "--name", "team", "--tenant", "team", "--quota", "A100:devices=4")
    _poll(lambda: srv.json("job", str(job_id), token=token)["state"] == "scheduled")
    for done in (job_id, first):
        srv.ok("cancel", str(done), token=token)


def test_fleet_listings_top_and_cordon(srv: Plane) -> None:
    nodes = srv.json("nodes")
    assert len(nodes) == 14
    assert {n["site"] for n in srv.json("nodes", "--site", "beijing")} == {"beijing"}
    devices = srv.json("devices", "--node", "bj-a100-0")
    assert len(devices) == 8 and all(d["node"] == "bj-a100-0" for d in devices)
    assert len(srv.json("devices")) == 112
    assert {s["name"] for s in srv.json("sites")} == {"beijing", "shanghai"}
    assert "bj-h100-1" in srv.ok("nodes").stdout
    assert "queues" in srv.ok("queues").stdout
    assert isinstance(srv.json("queues"), list)
    frame = srv.ok("top", "--once").stdout
    for text in ("xpupool top", "beijing", "shanghai", "sh-k100-1", "allocated"):
        assert text in frame
    snapshot = srv.json("top", "--once")
    assert len(snapshot["nodes"]) == 14 and len(snapshot["devices"]) == 112
    assert srv.json("node", "cordon", "sh-mlu-0")["schedulable"] is False
    assert "cordoned" in srv.ok("nodes", "--site", "shanghai").stdout
    assert srv.json("node", "uncordon", "sh-mlu-0")["schedulable"] is True
    uuid = devices[0]["uuid"]
    assert srv.json("device", "cordon", uuid)["cordoned"] is True
    assert srv.json("device", "uncordon", uuid)["cordoned"] is False
    drained = srv.json("site", "drain", "shanghai")  # issue 51: every node of it cordoned
    assert drained["name"] == "shanghai" and drained["devices_free"] == 0
    assert srv.json("site", "undrain", "shanghai")["devices_free"] > 0


def test_logs_print_what_the_agent_uploaded(srv: Plane) -> None:
    token = _tenant(srv, "logs")
    job_id = srv.json("submit", "L20", "--", "echo", "hi", token=token)["id"]
    path = srv.plane.log_path(job_id, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("step 1 loss=0.5\nstep 2 loss=0.25 ✓\n".encode())
    assert srv.ok("logs", str(job_id), token=token).stdout.endswith("loss=0.25 ✓\n")
    srv.ok("cancel", str(job_id), token=token)
    followed = srv.ok("logs", str(job_id), "-f", "--interval", "0.05", token=token).stdout
    assert followed.count("step") == 2
    beyond = srv.cli("logs", str(job_id), "--replica", "3", token=token)  # a one-replica job
    assert beyond.exit_code != 0
    assert "replica" in beyond.output and "has 1 replica(s)" in beyond.output


def test_tenant_and_token_admin(srv: Plane) -> None:
    _tenant(srv, "ops")
    assert "ops" in [t["name"] for t in srv.json("tenant", "list")]
    token = srv.json("token", "issue", "ops", "--role", "agent")
    assert token["role"] == "agent"
    listed = srv.json("token", "list")
    assert token["id"] in [t["id"] for t in listed]
    assert all(t["token"] is None for t in listed)  # secrets are shown once only
    assert "revoked" in srv.ok("token", "revoke", str(token["id"])).stdout
    bad = srv.cli("tenant", "create", "Bad Name")
    assert bad.exit_code == 1 and "name" in bad.output


def test_a_metrics_token_is_issued_for_prometheus(srv: Plane) -> None:
    token = srv.json("token", "issue", "--metrics", "--name", "prometheus")
    assert (token["role"], token["tenant"]) == ("metrics", None)
    said = srv.ok("token", "issue", "--metrics").stdout
    assert "reads /metrics only" in said
    headers = {"Authorization": f"Bearer {token['token']}"}
    assert httpx.get(f"{srv.url}/metrics", headers=headers).status_code == 200
    assert httpx.get(f"{srv.url}/v1/jobs", headers=headers).status_code == 403
    both = srv.cli("token", "issue", "ops", "--metrics")
    assert both.exit_code != 0 and "metrics token has no TENANT" in both.output


def test_invalid_spec_is_one_line_naming_the_field(srv: Plane) -> None:
    result = srv.cli("submit", "--tenant", "lab", "A100 mem=24Gx", "--", "true")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "spec.devices.memory" in result.output
    assert "Traceback" not in result.output


def test_a_bad_token_is_a_clean_error(srv: Plane) -> None:
    result = srv.cli("jobs", token="not-a-token")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "unknown or revoked token" in result.output and "XPUPOOL_TOKEN" in result.output


def test_no_server_says_cannot_reach(srv: Plane) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    result = srv.cli("nodes", url=url)
    assert result.exit_code == 1
    assert f"cannot reach xpupool at {url}" in result.output and result.output.count("\n") == 1


def test_local_admin_token_is_the_fallback(srv: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(srv.data.parent)  # where `xpupool up` wrote .xpupool/admin-token
    env = {"XPUPOOL_URL": srv.url, "HOME": str(srv.home), "XPUPOOL_TOKEN": None}
    result = CliRunner().invoke(main, ["tenant", "list", "-o", "json"], env=env)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), list)


def test_an_unknown_job_and_a_non_admin_are_clean_errors(srv: Plane) -> None:
    missing = srv.cli("job", "999999")
    assert missing.exit_code == 1 and missing.output == "Error: job '999999' not found\n"
    token = _tenant(srv, "plain")
    refused = srv.cli("tenant", "list", token=token)
    assert refused.exit_code == 1 and "admin only" in refused.output
    assert "needs the admin token" in refused.output  # how to act, not only what is wrong


def test_secret_set_list_delete(srv: Plane, tmp_path: Path) -> None:
    token = _tenant(srv, "vault")
    value = "hf_cli_secret_value_never_printed"
    result = CliRunner().invoke(
        main,
        ["secret", "set", "hf-token", "-o", "json"],
        input=value,
        env={"XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token, "HOME": str(srv.home)},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["size"] == len(value) and value not in result.output
    keystore = tmp_path / "keystore.bin"
    keystore.write_bytes(bytes(range(256)))
    srv.ok("secret", "set", "keystore", "--from-file", str(keystore), token=token)
    listed = srv.json("secret", "list", token=token)
    assert [(s["name"], s["size"]) for s in listed] == [("hf-token", len(value)), ("keystore", 256)]
    assert "hf-token" in srv.ok("secret", "list", "--tenant", "vault").stdout  # the admin's view
    assert "deleted" in srv.ok("secret", "delete", "keystore", token=token).stdout
    assert [s["name"] for s in srv.json("secret", "list", token=token)] == ["hf-token"]
    gone = srv.cli("secret", "delete", "keystore", token=token)
    assert gone.exit_code == 1 and "not found" in gone.output
    rotated = srv.json("secret", "rotate-key")
    assert rotated["resealed"] >= 1


def test_submit_names_secrets(srv: Plane) -> None:
    token = _tenant(srv, "keyed")
    CliRunner().invoke(
        main,
        ["secret", "set", "hf"],
        input="v",
        env={"XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token, "HOME": str(srv.home)},
    )
    job = srv.json("submit", "cpu=100m", "--secret", "hf:HF_TOKEN", "--", "true", token=token)
    assert job["secrets"] == [{"name": "hf", "env": "HF_TOKEN"}]
    bad = srv.cli("submit", "cpu=100m", "--secret", "nope", "--", "true", token=token)
    assert bad.exit_code == 1 and "secrets[0].name" in bad.output


def test_reservation_create_list_delete(srv: Plane) -> None:
    token = _tenant(srv, "booked")
    made = srv.json(
        "reservation", "create", "lab-day", "--tenant", "booked", "--cards", "A100x4",
        "--site", "beijing", "--from", "1h", "--to", "3h",
    )  # fmt: skip
    assert made["phase"] == "ahead" and len(made["devices"]) == 4
    assert made["end_at"] - made["start_at"] == 7200
    assert [r["name"] for r in srv.json("reservation", "list", token=token)] == ["lab-day"]
    assert "lab-day" in srv.ok("reservation", "list").stdout
    past = srv.cli(
        "reservation", "create", "late", "--tenant", "booked", "--cards", "A100x1",
        "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-01T01:00:00Z",
    )  # fmt: skip
    assert past.exit_code == 1 and "start_at" in past.output
    odd = srv.cli(
        "reservation", "create", "x", "--tenant", "booked", "--cards", "2", "--from", "soon",
        "--to", "1h",
    )  # fmt: skip
    assert odd.exit_code == 1 and "--from" in odd.output
    assert "deleted" in srv.ok("reservation", "delete", "lab-day").stdout
    assert srv.json("reservation", "list") == []
