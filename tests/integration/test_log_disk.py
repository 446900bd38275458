"""One tenant's output must not stop the control plane (issue 43, item 5): a real ``xpupool up``
whose data dir is a 20 MiB filesystem (a tmpfs mounted here, as root) and whose in-process agent
runs a job that prints 25 MiB. Before the reserve, the replica's copies of that output filled the
filesystem within seconds: SQLite could not grow its WAL, ``/healthz`` turned 503 and every write,
the admin's and a cancel included, was refused until someone freed space by hand.

Now the job's output stops being kept at the reserve (a marker line says so), the store keeps
working meanwhile, and once retention (``--retain-count 1``) forgets the job the next job's output
is kept in full again, with nobody touching the files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, until

from small_disk import free_bytes, small_disk

CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
FLOOD_MIB = 25
FLOOD = [
    JOB_PYTHON,
    "-c",
    "import sys, time\n"
    f"for _ in range({FLOOD_MIB * 1024}):\n"
    "    sys.stdout.write('x' * 1023 + '\\n')\n"
    "sys.stdout.flush()\n"
    "time.sleep(300)\n",
]
HELLO = [JOB_PYTHON, "-c", "print('hello')"]
HELD_BACK = "[xpupool: output discarded from here"


def _free_mib(path: Path) -> float:
    return free_bytes(path) / (1 << 20)


@pytest.fixture
def small_data(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "data", "20m") as data:
        yield data


def _log(srv: ServerProc, job_id: int) -> bytes:
    """The whole log as the API serves it (4 MiB a request)."""
    out = b""
    with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
        while True:
            r = admin.get(f"/v1/jobs/{job_id}/logs", params={"offset": len(out)})
            if r.status_code == 422 or not r.content:
                return out
            r.raise_for_status()
            out += r.content


def _healthy(srv: ServerProc) -> bool:
    r = httpx.get(f"{srv.url}/healthz", timeout=10)
    assert r.status_code == 200, f"/healthz: {r.status_code} {r.text}"
    return True


def test_a_flood_of_output_on_a_small_disk_leaves_the_plane_working(small_data: Path) -> None:
    extra = ("--heartbeat", "0.2", "--lost-after", "5", "--retain-count", "1")
    with ServerProc(small_data, cluster=CLUSTER, agent=True, extra_args=extra) as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10)
        team = srv.tenant_client("team")
        try:
            r = team.post("/v1/jobs", json={"command": FLOOD, "spec": "A100:1"})
            assert r.status_code == 201, r.text
            flood = int(r.json()["id"])

            def held_back() -> bool:
                _healthy(srv)
                return HELD_BACK in _log(srv, flood)[-4096:].decode(errors="replace")

            until(held_back, "the flood's log to stop at the reserve", 120)
            for _ in range(20):  # the job still runs and prints nothing more: nothing moves
                _healthy(srv)
            assert _free_mib(small_data) > 1.0, "the reserve was eaten"

            r = admin.post("/v1/tenants", json={"name": "other"})  # an admin write
            assert r.status_code == 201, r.text
            r = team.post(f"/v1/jobs/{flood}/cancel")  # the cancel path
            assert r.status_code in (200, 202), r.text
            until(
                lambda: team.get(f"/v1/jobs/{flood}").json()["state"] == "cancelled",
                "the flood to be cancelled",
                60,
            )
            _healthy(srv)

            # the next job runs (its output may be held back: the flood's copies are still kept)
            r = team.post("/v1/jobs", json={"command": HELLO, "spec": "A100:1"})
            assert r.status_code == 201, r.text
            second = int(r.json()["id"])
            until(
                lambda: team.get(f"/v1/jobs/{second}").json()["state"] == "succeeded",
                "the second job to succeed",
                60,
            )
            # retention (--retain-count 1) forgets the flood with its logs: the disk frees by itself
            until(
                lambda: team.get(f"/v1/jobs/{flood}").status_code == 404,
                "retention to forget the flood",
                60,
            )
            until(lambda: _free_mib(small_data) > 15, "the flood's copies to be removed", 30)
            r = team.post("/v1/jobs", json={"command": HELLO, "spec": "A100:1"})
            assert r.status_code == 201, r.text
            third = int(r.json()["id"])
            until(
                lambda: team.get(f"/v1/jobs/{third}").json()["state"] == "succeeded",
                "the third job to succeed",
                60,
            )
            assert until(lambda: _log(srv, third), "the third job's log") == b"hello\n"
            _healthy(srv)
        finally:
            admin.close()
            team.close()


def test_logs_on_a_filesystem_of_their_own_leave_the_store_s_alone(
    small_data: Path, tmp_path: Path
) -> None:
    """``--logs DIR``: the replicas' logs and the in-process agent's files go to DIR (here the
    test machine's disk), so the 25 MiB flood is kept whole while the 20 MiB data dir holds
    only the store; a pool started on another pool's DIR is refused."""
    logs = tmp_path / "logs"
    extra = ("--heartbeat", "0.2", "--lost-after", "5", "--logs", str(logs))
    with ServerProc(small_data, cluster=CLUSTER, agent=True, extra_args=extra) as srv:
        team = srv.tenant_client("team")
        try:
            r = team.post("/v1/jobs", json={"command": FLOOD, "spec": "A100:1"})
            assert r.status_code == 201, r.text
            flood = int(r.json()["id"])

            def whole() -> bool:
                _healthy(srv)
                return len(_log(srv, flood)) == FLOOD_MIB << 20

            until(whole, "the flood's whole log", 120)
            assert (logs / "logs" / str(flood) / "0.log").stat().st_size == FLOOD_MIB << 20
            assert not (small_data / "logs").exists() and not (small_data / "agent").exists()
            assert _free_mib(small_data) > 15
            r = team.post(f"/v1/jobs/{flood}/cancel")
            assert r.status_code in (200, 202), r.text
            until(
                lambda: team.get(f"/v1/jobs/{flood}").json()["state"] == "cancelled",
                "the flood to be cancelled",
                60,
            )
        finally:
            team.close()
    other = ServerProc(tmp_path / "other-data", extra_args=("--logs", str(logs)))
    with pytest.raises(RuntimeError, match="hold an earlier pool's"):
        other.start()  # a new pool over this pool's logs: refused (test_logs_root.py: the rest)
