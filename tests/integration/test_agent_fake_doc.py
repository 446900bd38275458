"""docs/agent.md's "Devices from a file" example, run as written against a real server: the
documented ``token issue`` line and ``xpupool agent ... --fake examples/agent-fake.yaml`` line,
from a folder holding the server's default data dir and ``examples/``, as the docs say (issue
42). The one thing that differs is the port: the server gets a free one, which the client reads
from ``XPUPOOL_URL`` and the agent line gets in place of ``http://127.0.0.1:8080``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from job_commands import JOB_PYTHON
from server_proc import DEFAULT_DATA, ROOT, ServerProc, stop_process, until

DOC = ROOT / "docs" / "agent.md"
SECTION = "### Devices from a file (`--fake FILE`)"
EXAMPLE = ROOT / "examples" / "agent-fake.yaml"
DOCUMENTED_URL = "http://127.0.0.1:8080"


def block(kind: str) -> str:
    """The first ``kind`` fenced block under ``SECTION``."""
    text = DOC.read_text()
    after = text[text.index(SECTION) :]
    start = after.index(f"```{kind}\n") + len(f"```{kind}\n")
    return after[start : after.index("```", start)]


def test_the_docs_show_the_example_file() -> None:
    assert yaml.safe_load(block("yaml")) == yaml.safe_load(EXAMPLE.read_text())


def test_the_docs_agent_example_joins_a_real_server_and_runs_a_job(tmp_path: Path) -> None:
    token_line, agent_line = block("sh").splitlines()
    assert DOCUMENTED_URL in agent_line and "--fake examples/agent-fake.yaml" in agent_line
    here = tmp_path / "here"
    here.mkdir()
    (here / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "xpupool").exists(), f"the docs run `xpupool`: none in {bin_dir}"
    (tmp_path / "home").mkdir()
    with ServerProc(here / DEFAULT_DATA, cwd=here, extra_args=("--heartbeat", "0.2")) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith("XPUPOOL_")}
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            XPUPOOL_URL=srv.url,
            HOME=str(tmp_path / "home"),
        )
        issued = subprocess.run(
            ["bash", "-c", token_line], cwd=here, env=env, capture_output=True, text=True
        )
        assert issued.returncode == 0, issued.stderr
        token_file = here / "agent-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().startswith("xpp_"), "the token, not the line before it"
        log = tmp_path / "agent.log"
        with log.open("wb") as out:
            agent = subprocess.Popen(
                ["bash", "-c", "exec " + agent_line.replace(DOCUMENTED_URL, srv.url)],
                cwd=here,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _check_the_node_and_a_job(srv, log)
        finally:
            stop_process(agent)


def _check_the_node_and_a_job(srv: ServerProc, log: Path) -> None:
    """``laptop`` with the file's three devices (the 910B unhealthy), and an A100 job on it."""
    with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
        node = until(
            lambda: (r := admin.get("/v1/nodes/laptop")).status_code == 200 and r.json(),
            f"node laptop ({log.read_text()[-2000:]})",
        )
        assert node["devices"] == 3, node
        found = {d["uuid"]: d for d in admin.get("/v1/devices").json() if d["node"] == "laptop"}
        assert sorted(found) == ["GPU-fake-a100-0", "GPU-fake-a100-1", "huawei-910B3-0"]
        assert found["huawei-910B3-0"]["healthy"] is False
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        token = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"}).json()["token"]
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    with httpx.Client(base_url=srv.url, headers=srv.headers(token)) as user:
        r = user.post("/v1/jobs", json={"command": [JOB_PYTHON, "-c", code], "spec": "A100"})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        job = until(
            lambda: (
                (j := user.get(f"/v1/jobs/{job_id}").json())["state"] in ("succeeded", "failed")
                and j
            ),
            f"job {job_id} ({log.read_text()[-2000:]})",
            60,
        )
        assert job["state"] == "succeeded", job["reason"]
        assert user.get(f"/v1/jobs/{job_id}/logs").text.strip() in ("0", "1")
