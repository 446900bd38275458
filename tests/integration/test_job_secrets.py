"""A job gets its tenant's secrets (docs/security.md#secrets) through a real ``xpupool up`` and
its in-process agent: as a file in ``$XPUPOOL_SECRETS_DIR``, owned by the job's uid and readable
by it alone, and as a variable where the job asks; the value is in no file the server or the
agent keeps (data dir, job root, agent work dir) and in no API answer, and the files go when
the job ends. Host back end and ``--sandbox bwrap``; the container back end is tested on podman
in test_container_engine.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, until

CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
VALUE = "hf_secret_Zq81nWm0pL3x"
SCRIPT = (
    'sha256sum < "$XPUPOOL_SECRETS_DIR/hf-token"; printf %s "$HF_TOKEN" | sha256sum; '
    'stat -c "mode %a owner %u" "$XPUPOOL_SECRETS_DIR/hf-token"; echo "uid $(id -u)"; '
    'ls "$XPUPOOL_SECRETS_DIR"; sleep 3'
)


@pytest.fixture
def job_root() -> Iterator[Path]:
    jobs = Path(tempfile.mkdtemp(prefix="xpupool-test-jobs-", dir="/tmp"))
    jobs.chmod(0o711)
    try:
        yield jobs
    finally:
        shutil.rmtree(jobs, ignore_errors=True)


def _holding(roots: list[Path], value: bytes) -> list[Path]:
    """Files under ``roots`` that hold ``value`` in clear or in base64 (as the wire carries it)."""
    needles = (value, base64.b64encode(value))
    found = []
    for root in roots:
        for path in root.rglob("*"):
            try:
                if path.is_file() and any(n in path.read_bytes() for n in needles):
                    found.append(path)
            except OSError:
                continue
    return found


def _ended(user: httpx.Client, job_id: int) -> dict[str, object]:
    job: dict[str, object] = user.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in ("succeeded", "failed", "lost", "cancelled") else {}


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_a_job_gets_its_secret_as_a_file_and_a_variable(
    tmp_path: Path, job_root: Path, sandbox: str
) -> None:
    args = ("--heartbeat", "0.2", "--job-root", str(job_root), "--sandbox", sandbox)
    with ServerProc(tmp_path / "data", cluster=CLUSTER, agent=True, extra_args=args) as srv:
        user = srv.tenant_client("lab")
        other = srv.tenant_client("other")
        try:
            assert user.put("/v1/secrets/hf-token", json={"secret": VALUE}).status_code == 201
            assert user.put("/v1/secrets/unused", json={"secret": "x"}).status_code == 201
            body = {
                "command": ["/bin/sh", "-c", SCRIPT],
                "spec": "cpu=100m",
                "secrets": [{"name": "hf-token", "env": "HF_TOKEN"}],
            }
            # another tenant cannot name it: names are looked up among its own secrets
            r = other.post("/v1/jobs", json=body)
            assert r.status_code == 422 and r.json()["field"] == "secrets[0].name", r.text
            r = user.post("/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            assert r.json()["secrets"] == [{"name": "hf-token", "env": "HF_TOKEN"}]
            job_id = r.json()["id"]
            until(
                lambda: "hf-token" in user.get(f"/v1/jobs/{job_id}/logs").text,
                f"job {job_id}'s output ({srv.log()[-2000:]})",
                60,
            )
            # while it runs: its spec, its work and its env reached the agent's files, not the value
            assert _holding([tmp_path, job_root], VALUE.encode()) == []
            job = until(lambda: _ended(user, job_id), f"job {job_id} ({srv.log()[-2000:]})", 60)
            log = user.get(f"/v1/jobs/{job_id}/logs").text
            assert job["state"] == "succeeded", (job, log)
            digest = hashlib.sha256(VALUE.encode()).hexdigest()
            assert log.count(digest) == 2, log  # the file, then the variable
            uid = log.split("uid ")[1].split()[0]
            assert f"mode 400 owner {uid}" in log, log
            assert log.split("uid ")[1].split()[1:] == ["hf-token"], log  # its own secrets only
            if os.geteuid() == 0:
                assert uid != "0"
            answers = user.get(f"/v1/jobs/{job_id}").text + user.get("/v1/jobs").text
            assert VALUE not in answers
        finally:
            user.close()
            other.close()
        until(
            lambda: not _holding([Path("/dev/shm")], VALUE.encode()),
            "the secret files' removal after the job",
        )
    assert _holding([tmp_path, job_root], VALUE.encode()) == []


def test_a_job_naming_no_such_secret_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    with ServerProc(tmp_path / "data", cluster=CLUSTER) as srv:
        user = srv.tenant_client("lab")
        try:
            body = {"command": ["true"], "secrets": [{"name": "missing"}]}
            r = user.post("/v1/jobs", json=body)
            assert r.status_code == 422 and r.json()["field"] == "secrets[0].name", r.text
            twice = {"command": ["true"], "secrets": [{"name": "a"}, {"name": "a"}]}
            r = user.post("/v1/jobs", json=twice)
            assert r.status_code == 422 and r.json()["field"] == "secrets[1].name", r.text
            bad_var = {"command": ["true"], "secrets": [{"name": "a", "env": "1BAD"}]}
            r = user.post("/v1/jobs", json=bad_var)
            assert r.status_code == 422 and r.json()["field"] == "secrets[0].env", r.text
            assert user.get("/v1/jobs").json() == []
        finally:
            user.close()
