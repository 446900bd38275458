"""Re-cutting a MIG card end to end (issue 53): a real ``xpupool up`` and a real ``xpupool
agent`` whose fake probe reads an A100 cut 3g.40gb@0, 2g.20gb@4, 1g.10gb@6, with the fake
``nvidia-smi`` (``probes/fake_tool.py``) on the agent's PATH. The admin asks for two 3g.40gb
(``xpupool node recut``); the agent runs the tool from its heartbeat reply, its probe reads the
new instances, the server records the re-cut applied, ``/v1/devices`` shows them and two
``mig=3g.40gb`` jobs run on them. Then a re-cut whose creation the tool refuses is reported
failed, with the tool's words, and the card is shown as the tool left it; and an Ascend chip's
vNPUs are re-cut with the fake ``npu-smi``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

from xpupool.probes.fake_tool import FAIL_ENV, FILE_ENV

pytestmark = pytest.mark.slow

CARD = "GPU-a100-0"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
FAKE = """\
devices:
  - vendor: nvidia
    model: NVIDIA A100-SXM4-80GB
    count: 1
    memory: 80Gi
    driver: 550.54.15
    runtimes: {cuda: "12.4"}
    uuid_prefix: GPU-a100
    partitions: [3g.40gb@0, 2g.20gb@4, 1g.10gb@6]
  - {vendor: huawei, model: 910B3, memory: 64Gi, uuid_prefix: NPU-b,
     partitions: [vir05_1c_16g, vir05_1c_16g]}
"""


def _tools(bin_dir: Path) -> None:
    """``nvidia-smi`` and ``npu-smi`` on PATH: the fake tool under each name."""
    bin_dir.mkdir()
    for name in ("nvidia-smi", "npu-smi"):
        tool = bin_dir / name
        tool.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -m xpupool.probes.fake_tool {name} "$@"\n'
        )
        tool.chmod(0o755)


def _layout(admin: httpx.Client, card: str = CARD) -> list[str]:
    return sorted(
        d["partition"] + ("" if d["partition_start"] is None else f"@{d['partition_start']}")
        for d in admin.get("/v1/devices").json()
        if d["partition_of"] == card
    )


def _card(admin: httpx.Client, card: str = CARD) -> dict[str, Any]:
    r = admin.get(f"/v1/nodes/box/cards/{card}/layout")
    r.raise_for_status()
    return dict(r.json())


def fake_box(tmp_path: Path, **more_env: str) -> tuple[Path, dict[str, str]]:
    """:data:`FAKE` written under ``tmp_path`` and the agent's environment: the fake tools first
    on its PATH, the fake-probe file named, and ``more_env``."""
    fake = tmp_path / "fake.yaml"
    fake.write_text(FAKE)
    _tools(tmp_path / "bin")
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return fake, {**os.environ, "PATH": path, FILE_ENV: str(fake), **more_env}


def test_the_agent_recuts_a_card_with_the_vendor_tool(tmp_path: Path) -> None:
    # the tool refuses to create 1g.10gb@6 (the second re-cut)
    fake, env = fake_box(tmp_path, **{FAIL_ENV: "1g.10gb:6"})
    extra = ("--heartbeat", "0.2", "--recut-min-idle", "0s")
    with ServerProc(tmp_path / "data", extra_args=extra) as srv:
        agent, log = srv.start_agent(tmp_path, "box", fake, "--poll", "0.05", env=env)
        try:
            with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
                before = ["1g.10gb@6", "2g.20gb@4", "3g.40gb@0"]
                until(lambda: _layout(admin) == before, f"the card's instances ({log})")
                recut = [*CLI, "node", "recut", "box", CARD, "3g.40gb@0,3g.40gb@4"]
                recut += ["--why", "two 3g wanted", "--url", srv.url, "--token", srv.admin_token]
                said = subprocess.run([*recut, "-o", "json"], capture_output=True, timeout=60)
                assert said.returncode == 0, said.stderr
                assert json.loads(said.stdout)["wanted"] == ["3g.40gb@0", "3g.40gb@4"]
                until(
                    lambda: _card(admin)["events"][0]["event"] == "applied",
                    f"the re-cut applied ({log.read_text()[-2000:]})",
                )
                assert _card(admin)["wanted"] is None
                assert _layout(admin) == ["3g.40gb@0", "3g.40gb@4"]
                assert "3g.40gb@4" in fake.read_text()  # what the tool changed
                _two_jobs_run_on_the_new_instances(srv)
                r = admin.put(
                    f"/v1/nodes/box/cards/{CARD}/layout",
                    json={"layout": ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]},
                )
                assert r.status_code == 200, r.text
                until(
                    lambda: _card(admin)["events"][0]["event"] == "failed",
                    f"the failed re-cut reported ({log.read_text()[-2000:]})",
                )
                found = _card(admin)
                assert found["wanted"] is None
                assert "failed on demand" in found["events"][0]["detail"], found
                # the tool destroyed 3g.40gb@4 before it refused: the card is shown as it is
                until(lambda: _layout(admin) == ["3g.40gb@0"], "the card as the tool left it")
                # an Ascend chip: npu-smi destroys both vNPUs and creates the larger template
                r = admin.put(
                    "/v1/nodes/box/cards/NPU-b-0/layout", json={"layout": ["vir10_3c_32g"]}
                )
                assert r.status_code == 200, r.text
                until(
                    lambda: _card(admin, "NPU-b-0")["events"][0]["event"] == "applied",
                    f"the vNPU re-cut applied ({log.read_text()[-2000:]})",
                )
                assert _layout(admin, "NPU-b-0") == ["vir10_3c_32g"]
        finally:
            stop_process(agent)


def _two_jobs_run_on_the_new_instances(srv: ServerProc) -> None:
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    with srv.tenant_client("team") as user:
        ids = []
        for _ in range(2):
            r = user.post(
                "/v1/jobs", json={"spec": "A100 mig=3g.40gb", "command": [JOB_PYTHON, "-c", show]}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        seen = [
            until(
                lambda i=i: (
                    user.get(f"/v1/jobs/{i}").json()["state"] == "succeeded"
                    and user.get(f"/v1/jobs/{i}/logs").text.strip()
                ),
                f"job {i} succeeded",
                60,
            )
            for i in ids
        ]
    # each ran on one of the new 3g.40gb instances, named as CUDA names MIG devices
    assert sorted(seen) == [f"MIG-{CARD}-0", f"MIG-{CARD}-4"]
