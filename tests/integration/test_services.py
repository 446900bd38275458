"""A service end to end: a real ``xpupool up`` whose in-process agent runs each replica as a host
process (a stdlib HTTP server), the CLI creating, listing, showing, stopping, starting and
deleting it. The service becomes ready, a replica that exits is replaced, a change of its job
rolls it to a new generation, stopping it ends its replicas until it is started, and deleting it
stops its replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, until

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
REPLICA = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/crash":
            os._exit(1)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(os.environ.get("VERSION", "1").encode())
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[ServerProc, httpx.Client, dict[str, str]]]:
    args = ("--heartbeat", "0.2", "--lost-after", "2")
    with ServerProc(tmp_path / "data", agent=True, extra_args=args) as srv:
        user = srv.tenant_client("team")
        token = user.headers["Authorization"].removeprefix("Bearer ")
        env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token}
        with user:
            yield srv, user, env


def cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "json" in args else done.stdout


REPLICA_COMMAND = [JOB_PYTHON, "-c", REPLICA]


def test_a_host_service_is_ready_restarted_rolled_and_deleted(
    up: tuple[ServerProc, httpx.Client, dict[str, str]],
) -> None:
    _, user, env = up
    made = cli(env, "serve", "--name", "web", "--ready-path", "/health", "-o", "json",
               "--", *REPLICA_COMMAND)  # fmt: skip
    assert made["url"] == "/v1/services/web/proxy/" and made["state"] == "pending"

    def service() -> dict[str, Any]:
        r = user.get("/v1/services/web")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def ready(generation: int) -> dict[str, Any] | None:
        got = service()
        serving = [r for r in got["replicas"] if r["ready"] and r["generation"] == generation]
        return got if got["state"] == "ready" and serving else None

    got = until(lambda: ready(1), "service web ready", 60)
    (one,) = got["replicas"]
    first = one["port"]  # the node port the agent picked, the replica's $PORT
    assert one["host"] == "127.0.0.1" and first
    assert httpx.get(f"http://127.0.0.1:{first}/", timeout=5).text == "1"

    with pytest.raises(httpx.HTTPError):  # the replica exits 1 on this request
        httpx.get(f"http://127.0.0.1:{first}/crash", timeout=5)

    def replaced() -> dict[str, Any] | None:
        got = ready(1)
        return got if got and got["replicas"][0]["job_id"] != one["job_id"] else None

    got = until(replaced, "the replica replaced", 60)
    reasons = [e["reason"] for e in got["events"]]
    assert any("replica web-1 exited 1; next try in" in r for r in reasons), reasons
    assert user.get(f"/v1/jobs/{one['job_id']}").json()["state"] == "failed"

    spec = dict(got["spec"])
    spec["job"] = {**spec["job"], "env": {"VERSION": "2"}}
    spec["readiness"] = {"path": "/health", "interval_s": 0.5, "timeout_s": 0.5}
    r = user.put("/v1/services/web", json=spec)
    assert r.status_code == 200 and r.json()["generation"] == 2, r.text
    old = got["replicas"][0]["job_id"]

    def rolled() -> dict[str, Any] | None:
        got = ready(2)
        return got if got and [x["generation"] for x in got["replicas"]] == [2] else None

    got = until(rolled, "the service rolled to generation 2", 60)
    second = got["replicas"][0]["port"]
    assert httpx.get(f"http://127.0.0.1:{second}/", timeout=5).text == "2"
    until(lambda: user.get(f"/v1/jobs/{old}").json()["state"] == "cancelled", "old replica gone")
    assert any(e["state"] == "updating" for e in got["events"])

    listed = cli(env, "services", "-o", "json")
    assert [(s["name"], s["ready"], s["desired"]) for s in listed] == [("web", 1, 1)]
    assert "web-" in cli(env, "service", "show", "web")
    last = got["replicas"][0]["job_id"]

    assert "service web stopped" in cli(env, "service", "stop", "web")
    until(lambda: user.get(f"/v1/jobs/{last}").json()["state"] == "cancelled", "replica ended")
    until(lambda: service()["replicas"] == [], "the stopped service's replicas gone")
    assert service()["state"] == "stopped"
    r = user.get("/v1/services/web/proxy/")
    assert r.status_code == 503 and "is stopped" in r.json()["detail"], r.text
    refused = subprocess.run([*CLI, "service", "stop", "web"], env=env, capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0 and "stopped already" in refused.stderr, refused.stderr
    assert "service web pending" in cli(env, "service", "start", "web")
    got = until(lambda: ready(2), "service web ready again after its start", 60)
    assert got["replicas"][0]["job_id"] != last
    last = got["replicas"][0]["job_id"]
    assert "service web deleted" in cli(env, "service", "delete", "web")
    assert user.get("/v1/services/web").status_code == 404
    until(lambda: user.get(f"/v1/jobs/{last}").json()["state"] == "cancelled", "replica stopped")


def test_serve_wait_shows_the_service_once_ready_and_a_timeout_names_its_state(
    up: tuple[ServerProc, httpx.Client, dict[str, str]],
) -> None:
    """Issue 47: ``--wait`` was ignored for a service (``submit --model M --task serve --wait``
    answered at once with a pending service); ``serve --wait`` now returns once the service is
    ready, and a service that never gets ready fails the wait naming ``--timeout`` and its
    state, the service left running."""
    _, user, env = up
    made = cli(env, "serve", "--name", "waited", "--wait", "--timeout", "60", "-o", "json",
               "--", *REPLICA_COMMAND)  # fmt: skip
    assert made["state"] == "ready" and made["ready"] == 1, made
    never = [JOB_PYTHON, "-c", "import time; time.sleep(600)"]  # never answers its probe
    done = subprocess.run(
        [*CLI, "serve", "--name", "never", "--wait", "--timeout", "3", "--", *never],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert "--timeout" in done.stderr and "service never still" in done.stderr, done.stderr
    assert user.get("/v1/services/never").status_code == 200  # not deleted by the wait
    for name in ("waited", "never"):
        assert user.delete(f"/v1/services/{name}").status_code in (200, 204)
