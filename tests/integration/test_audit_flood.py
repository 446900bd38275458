"""A hostile node floods the audit log (issue 43, item 8), against a real ``xpupool up``: an
agent credential heartbeating as another node in a loop (and asking for what it may not) wrote
one row per call into one bounded table, pushing the admin's history out of it. Its refusals are
aggregated with a count, kept to their own cap (``--audit-keep-refused``), and the admin's rows
stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from server_proc import CLUSTER_MIXED, ServerProc

PROTOCOL = {"X-Xpupool-Agent-Protocol": "2"}
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
NO_RATE_LIMIT = ("--rate-limit", "0")


def test_a_refusal_flood_is_counted_and_the_admins_history_stays(tmp_path: Path) -> None:
    # The flood is sent as fast as one client can, past the default rate limit (its own tests are
    # in test_http_limits.py): this test is about what the audit keeps of what gets through.
    extra = ("--audit-keep", "1000", "--audit-keep-refused", "2", *NO_RATE_LIMIT)
    with (
        ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED, extra_args=extra) as srv,
        httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as admin,
    ):
        assert admin.post("/v1/tenants", json={"name": "vision"}).status_code == 201
        nodes = [n["name"] for n in admin.get("/v1/nodes").json()]
        own, other = nodes[0], nodes[1]
        r = admin.post("/v1/tokens", json={"role": "agent", "node": own})
        assert r.status_code == 201, r.text
        hostile = httpx.Client(
            base_url=srv.url,
            headers={"Authorization": f"Bearer {r.json()['token']}", **PROTOCOL},
            timeout=30,
        )
        with hostile:
            for _ in range(600):
                r = hostile.post("/v1/agent/heartbeat", json={"node": other})
                assert r.status_code == 403, r.text
            assert hostile.get("/v1/jobs").status_code == 403
            assert hostile.get("/v1/tenants").status_code == 403
            bad = hostile.post("/v1/agent/heartbeat", json={"node": own, "replicas": "x"})
            assert bad.status_code == 422, bad.text
        rows = admin.get("/v1/audit", params={"limit": 10_000}).json()
        refused = [r for r in rows if r["kind"] == "refused"]
        assert 1 <= len(refused) <= 2, refused  # four kinds of refusal, two rows kept
        assert all(1 <= r["count"] <= 600 for r in refused), refused
        ours = [(r["action"], r["target"]) for r in rows if r["kind"] == "admin"]
        assert ("create_tenant", "tenant vision") in ours, ours
        assert len(rows) < 10, rows

    # the flood, counted in one row, as the CLI shows it (a fresh server: the cap of 2 above
    # keeps only the newest kinds of refusal)
    with (
        ServerProc(tmp_path / "data2", cluster=CLUSTER_MIXED, extra_args=NO_RATE_LIMIT) as srv,
        httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as admin,
    ):
        nodes = [n["name"] for n in admin.get("/v1/nodes").json()]
        r = admin.post("/v1/tokens", json={"role": "agent", "node": nodes[0]})
        token = r.json()["token"]
        headers = {"Authorization": f"Bearer {token}", **PROTOCOL}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as hostile:
            for _ in range(300):
                assert hostile.post("/v1/agent/heartbeat", json={"node": nodes[1]}).status_code
        beats = [
            r
            for r in admin.get("/v1/audit", params={"kind": "refused"}).json()
            if r["action"] == "heartbeat"
        ]
        assert [(b["count"], b["source"]) for b in beats] == [(300, "127.0.0.1")]
        env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": srv.admin_token}
        env |= {"HOME": str(tmp_path), "COLUMNS": "250"}
        out = subprocess.run(
            [*CLI, "audit", "--kind", "refused"], env=env, capture_output=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert b"300x in" in out.stdout and b"from 127.0.0.1" in out.stdout, out.stdout
