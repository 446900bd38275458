"""A job mounts volumes the admin declared, through a real ``xpupool up`` and its in-process agent
(host back end and ``--sandbox bwrap``; podman in test_container_engine.py): a per-tenant volume
is the tenant's own directory, made for its uid; a read-only one cannot be written; another
tenant cannot name either."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, until
from test_job_secrets import CLUSTER, _ended

SCRIPT = (
    'echo data > "$XPUPOOL_VOLUME_SCRATCH/out" && echo wrote; '
    'cat "$XPUPOOL_VOLUME_REF/hello"; '
    'touch "$XPUPOOL_VOLUME_REF/x" 2>/dev/null && echo ref-writable || echo ref-read-only'
)


@pytest.fixture
def place() -> Iterator[Path]:
    """Where any uid can reach (not pytest's 0700 temp dir), as a node's /srv would be."""
    top = Path(tempfile.mkdtemp(prefix="xpupool-volumes-", dir="/var/lib"))
    top.chmod(0o755)
    try:
        for name in ("scratch", "ref", "mnt-scratch", "mnt-ref", "jobs"):
            (top / name).mkdir(mode=0o755)
            (top / name).chmod(0o755 if name != "jobs" else 0o711)
        (top / "ref" / "hello").write_text("hello from ref\n")
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_a_job_writes_its_own_volume_and_reads_a_shared_one(place: Path, sandbox: str) -> None:
    args = ("--heartbeat", "0.2", "--job-root", str(place / "jobs"), "--sandbox", sandbox)
    with ServerProc(place / "data", cluster=CLUSTER, agent=True, extra_args=args) as srv:
        with httpx.Client(base_url=srv.url, headers=srv.headers()) as a:
            body = {"path": str(place / "scratch"), "per_tenant": True}
            assert a.put("/v1/volumes/scratch", json=body).status_code == 201
            ro = {"path": str(place / "ref"), "read_only": True, "tenants": ["lab"]}
            assert a.put("/v1/volumes/ref", json=ro).status_code == 201
        user = srv.tenant_client("lab")
        other = srv.tenant_client("other")
        try:
            mounts = [
                {"name": "scratch", "path": str(place / "mnt-scratch")},
                {"name": "ref", "path": str(place / "mnt-ref"), "read_only": True},
            ]
            job = {"command": ["/bin/sh", "-c", SCRIPT], "spec": "cpu=100m", "volumes": mounts}
            refused = other.post("/v1/jobs", json=job)
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == "volumes[1].name"
            r = user.post("/v1/jobs", json=job)
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            done = until(lambda: _ended(user, job_id), f"job {job_id} ({srv.log()[-2000:]})", 60)
            log = user.get(f"/v1/jobs/{job_id}/logs").text
            assert done["state"] == "succeeded", (done, log)
            assert "wrote" in log and "hello from ref" in log, log
            mine = place / "scratch" / "lab"
            assert (mine / "out").read_text() == "data\n"
            if os.geteuid() == 0:
                assert "ref-read-only" in log, log
                assert (
                    mine.stat().st_uid != 0 and (mine / "out").stat().st_uid == mine.stat().st_uid
                )
            assert not (place / "ref" / "x").exists()

            def measured() -> bool:
                vols = {v["name"]: v for v in user.get("/v1/volumes").json()}
                return [u["tenant"] for u in vols["scratch"]["usage"]] == ["lab"]

            until(measured, "the agent's measure of the tenant's directory", 30)
            if os.geteuid() == 0:  # another tenant's job, on the same volume, next to lab's own
                snoop = (
                    'cat "$XPUPOOL_VOLUME_SCRATCH/../lab/out" 2>/dev/null && echo read-it '
                    '|| echo denied; ls "$XPUPOOL_VOLUME_SCRATCH/.." 2>/dev/null | grep -c lab'
                )
                theirs = {
                    "command": ["/bin/sh", "-c", snoop],
                    "spec": "cpu=100m",
                    "volumes": [{"name": "scratch", "path": str(place / "mnt-scratch")}],
                }
                r = other.post("/v1/jobs", json=theirs)
                assert r.status_code == 201, r.text
                oid = r.json()["id"]
                until(lambda: _ended(other, oid), f"job {oid} ({srv.log()[-2000:]})", 60)
                seen = other.get(f"/v1/jobs/{oid}/logs").text
                assert "denied" in seen and "read-it" not in seen and "data" not in seen, seen
                assert (place / "scratch" / "other").stat().st_uid != mine.stat().st_uid
        finally:
            user.close()
            other.close()
