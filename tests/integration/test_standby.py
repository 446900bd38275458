"""Two ``xpupool up`` on one PostgreSQL database (``server/standby.py``): the active one serves;
the other, started with ``--standby``, answers 503 until the active plane is lost (SIGKILL, or
SIGSTOP past its store lease, or cut off from the database), then takes the store and serves the
same pool. Submissions run all along: every job either plane acknowledged is in the store once.
The plane that was paused and woken (SIGCONT), or whose cut ended, after the take-over writes
nothing more: its epoch is fenced.

Real processes on a real PostgreSQL (tests/postgres.py) on 127.0.0.1; the store lease is the
default (10 s), as an operator runs it: the take-over takes that long.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import CLUSTER_MIXED, ServerProc, free_port, stop_process, until
from sqlalchemy.engine import make_url

from tcp_proxy import TcpProxy

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
JOB = {"spec": "A100 mem=1Gi cores=1%", "command": ["true"]}
TAKEOVER_S = 60.0  # the most a test waits (a loaded machine); the figure is in the report
ANSWER_S = 10.0  # the most a plane whose store stalls may take to answer (a loaded machine)


class Submitter(threading.Thread):
    """Submits one job after another to whichever of ``urls`` answers, recording each id a plane
    acknowledged (201); a refused or unanswered submission is tried on the next URL."""

    def __init__(self, urls: list[str], token: str) -> None:
        super().__init__(daemon=True)
        self.urls, self.token = urls, token
        self.acked: list[int] = []
        self.refused = 0
        self.stop = threading.Event()

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            url = self.urls[k % len(self.urls)]
            try:
                r = httpx.post(
                    f"{url}/v1/jobs",
                    json={**JOB, "name": f"s{len(self.acked)}"},
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=2.0,
                )
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code == 201:
                self.acked.append(int(r.json()["id"]))
                time.sleep(0.05)
            else:
                self.refused += 1
                k += 1  # the next plane
                time.sleep(0.1)


def start_standby(
    data: Path, port: int, url: str, extra: tuple[str, ...] = ("--cluster", str(CLUSTER_MIXED))
) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True, exist_ok=True)
    argv = [*CLI, "up", "--standby", "--db", url, "--data", str(data), "--port", str(port)]
    argv += [*extra, "--no-agent"]
    with (data / "server.log").open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def health(url: str) -> tuple[int, str]:
    try:
        r = httpx.get(f"{url}/healthz", timeout=1.0)
    except httpx.TransportError as exc:
        return 0, repr(exc)
    return r.status_code, r.text


@pytest.mark.parametrize("loss", ["SIGKILL", "SIGSTOP"])
def test_the_standby_takes_over_and_every_acknowledged_job_is_kept_once(
    tmp_path: Path, pg_url: str, loss: str
) -> None:
    # both planes given one admin token (a Kubernetes Secret: docs/postgresql.md)
    shared = tmp_path / "admin-token-secret"
    shared.write_text(secrets.token_hex(32) + "\n")
    given = ("--admin-token-file", str(shared))
    active = ServerProc(
        tmp_path / "a", cluster=CLUSTER_MIXED, extra_args=("--db", pg_url, "--no-agent", *given)
    )
    standby_port = free_port()
    standby_url = f"http://127.0.0.1:{standby_port}"
    standby: subprocess.Popen[bytes] | None = None
    submitter: Submitter | None = None
    try:
        active.start()
        with active.tenant_client("team") as team:
            token = team.headers["Authorization"].split()[1]
        assert active.admin_token == shared.read_text().strip()
        standby = start_standby(
            tmp_path / "b", standby_port, pg_url, ("--cluster", str(CLUSTER_MIXED), *given)
        )
        status, text = until(
            lambda: (lambda h: h if "owned by another xpupool up" in h[1] else None)(
                health(standby_url)
            ),
            "the standby answering 503, naming the owner",
        )
        assert status == 503 and text.startswith("standby: the store ")
        r = httpx.post(f"{standby_url}/v1/jobs", json=JOB, headers=active.headers())
        assert r.status_code == 503  # nothing is taken while standing by
        submitter = Submitter([active.url, standby_url], token)
        submitter.start()
        until(lambda: len(submitter.acked) >= 5, "jobs acknowledged by the active plane")
        assert active.proc is not None
        lost_at = time.monotonic()
        os.killpg(active.proc.pid, getattr(signal, loss))
        until(lambda: health(standby_url)[0] == 200, "the standby serving", timeout_s=TAKEOVER_S)
        took_s = time.monotonic() - lost_at
        print(f"take-over after {loss}: {took_s:.1f} s")
        before = len(submitter.acked)
        until(lambda: len(submitter.acked) >= before + 5, "jobs acknowledged by the new plane")
        if loss == "SIGSTOP":
            os.killpg(active.proc.pid, signal.SIGCONT)  # it wakes up, believing it owns the store
            # its first answer may name the connection the database closed while it slept;
            # then the lost store (to the standby, or its lease ran out: both true), for good
            until(
                lambda: (lambda h: h[0] == 503 and "lost the store" in h[1])(health(active.url)),
                "the woken plane reporting the store lost",
            )
            r = httpx.post(f"{active.url}/v1/jobs", json=JOB, headers=active.headers(token))
            assert r.status_code == 503, r.text
        submitter.stop.set()
        submitter.join(10)
        # the standby's data dir has the admin token too, though it made no store
        assert (tmp_path / "b" / "admin-token").read_text().strip() == active.admin_token
        admin = {"Authorization": f"Bearer {active.admin_token}"}
        listed = httpx.get(
            f"{standby_url}/v1/jobs", params={"limit": 1000}, headers=admin, timeout=10
        ).json()
        ids = [j["id"] for j in listed]
        assert len(ids) == len(set(ids))  # no job stored twice
        assert set(submitter.acked) <= set(ids), set(submitter.acked) - set(ids)
        assert len(submitter.acked) == len(set(submitter.acked))  # no id handed out twice
    finally:
        if submitter is not None:
            submitter.stop.set()
        if active.proc is not None and active.proc.poll() is None:
            os.killpg(active.proc.pid, signal.SIGCONT)
        active.kill()
        if standby is not None and standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(10)


def test_a_plane_cut_off_from_the_database_loses_it_to_the_standby_and_stays_fenced(
    tmp_path: Path, pg_url: str
) -> None:
    url = make_url(pg_url)
    relay = TcpProxy((str(url.host), int(url.port or 5432)))
    through_relay = url.set(port=relay.port).render_as_string(hide_password=False)
    active = ServerProc(
        tmp_path / "a", cluster=CLUSTER_MIXED, extra_args=("--db", through_relay, "--no-agent")
    )
    standby_url = ""
    standby: subprocess.Popen[bytes] | None = None
    try:
        active.start()
        with active.tenant_client("team") as team:
            token = team.headers["Authorization"].split()[1]
            assert team.post("/v1/jobs", json=JOB).status_code == 201
        port = free_port()
        standby_url = f"http://127.0.0.1:{port}"
        standby = start_standby(tmp_path / "b", port, pg_url)
        until(lambda: "owned by another" in health(standby_url)[1], "the standby")
        relay.cut()
        r = httpx.post(f"{active.url}/v1/jobs", json=JOB, headers=active.headers(token))
        assert r.status_code == 503, r.text  # the database is unreachable: nothing taken
        until(lambda: health(standby_url)[0] == 200, "the standby serving", timeout_s=TAKEOVER_S)
        relay.resume()  # the cut ends: the old plane reaches the database again
        status, _ = until(
            lambda: (lambda h: h if "lost the store" in h[1] else None)(health(active.url)),
            "the old plane finding the store taken",
        )
        assert status == 503
        r = httpx.post(f"{active.url}/v1/jobs", json=JOB, headers=active.headers(token))
        assert r.status_code == 503, r.text
        r = httpx.post(f"{standby_url}/v1/jobs", json=JOB, headers=active.headers(token))
        assert r.status_code == 201, r.text
    finally:
        active.kill()
        relay.close()
        if standby is not None and standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(10)


def test_an_agent_given_both_planes_follows_the_take_over_and_no_job_runs_twice(
    tmp_path: Path, pg_url: str
) -> None:
    """Issue 50: agents reconnect to whichever plane is active. A standalone agent is given
    both URLs (``--server A,B``); a job runs on its node when the active plane is killed. The
    standby takes the store, the agent's next heartbeats reach it, the running job is adopted
    and ends there after its one run, and a job submitted to the new plane runs on the node."""
    timing = ("--heartbeat", "0.5", "--lost-after", "60")
    active = ServerProc(tmp_path / "a", extra_args=("--db", pg_url, "--no-agent", *timing))
    standby_port = free_port()
    standby_url = f"http://127.0.0.1:{standby_port}"
    standby: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None
    try:
        active.start()
        admin = active.headers()
        with active.tenant_client("team") as team:
            token = team.headers["Authorization"].split()[1]
        r = httpx.post(
            f"{active.url}/v1/tenants/team/tokens", json={"role": "agent"}, headers=admin
        )
        env = {**os.environ, "XPUPOOL_TOKEN": r.json()["token"]}
        user = {"Authorization": f"Bearer {token}"}
        standby = start_standby(tmp_path / "b", standby_port, pg_url, timing)
        argv = [*CLI, "agent", "--server", f"{active.url},{standby_url}", "--node", "box"]
        argv += ["--fake", str(FAKE), "--work-dir", str(tmp_path / "agent"), "--poll", "0.05"]
        with (tmp_path / "agent.log").open("ab") as log:
            agent = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        until(
            lambda: httpx.get(f"{active.url}/v1/nodes/box", headers=admin).status_code == 200,
            "the agent registered with the active plane",
        )
        long_job = {"spec": "A100", "command": [JOB_PYTHON, "-c", "import time; time.sleep(12)"]}
        r = httpx.post(f"{active.url}/v1/jobs", json=long_job, headers=user)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def state(url: str, jid: int) -> dict[str, object] | None:
            try:
                got = httpx.get(f"{url}/v1/jobs/{jid}", headers=user, timeout=2.0)
            except httpx.TransportError:
                return None
            return dict(got.json()) if got.status_code == 200 else None

        until(
            lambda: (state(active.url, job_id) or {}).get("state") == "running",
            "the job running on the agent's node",
        )
        assert active.proc is not None
        os.killpg(active.proc.pid, signal.SIGKILL)
        until(lambda: health(standby_url)[0] == 200, "the standby serving", timeout_s=TAKEOVER_S)
        ended = until(
            lambda: (lambda j: j if j and j["state"] in ("succeeded", "failed") else None)(
                state(standby_url, job_id)
            ),
            "the running job ending on the new plane",
            timeout_s=TAKEOVER_S,
        )
        assert ended["state"] == "succeeded" and ended["attempts"] == 1, ended  # one run
        r = httpx.post(
            f"{standby_url}/v1/jobs", json={"spec": "A100", "command": ["true"]}, headers=user
        )
        assert r.status_code == 201, r.text
        second = r.json()["id"]
        done = until(
            lambda: (lambda j: j if j and j["state"] in ("succeeded", "failed") else None)(
                state(standby_url, second)
            ),
            "a new job run on the node through the new plane",
            timeout_s=TAKEOVER_S,
        )
        assert done["state"] == "succeeded", done
    finally:
        if agent is not None:
            stop_process(agent)
        active.kill()
        if standby is not None and standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(10)


def test_sessions_the_audit_and_secrets_survive_a_take_over(tmp_path: Path, pg_url: str) -> None:
    """Issue 50: what a browser, the admin and a tenant had on the lost plane is on the new
    one. A dashboard session made on the active plane works on the standby after the take-over
    (its CSRF secret too: the same page); the audit rows written before are all there and new
    ones are appended after them; a tenant's secret still opens (a key rotation opens every
    sealed value), both planes given the same ``--secret-key-file``, as the chart mounts one
    Secret in every replica."""
    key = tmp_path / "secret.key"
    shared = ("--secret-key-file", str(key))
    active = ServerProc(
        tmp_path / "a", cluster=CLUSTER_MIXED, extra_args=("--db", pg_url, "--no-agent", *shared)
    )
    standby_port = free_port()
    standby_url = f"http://127.0.0.1:{standby_port}"
    standby: subprocess.Popen[bytes] | None = None
    try:
        active.start()
        admin = active.headers()
        with active.tenant_client("team") as team:
            r = team.put("/v1/secrets/db-password", json={"secret": "hunter2"})
            assert r.status_code == 201, r.text
        r = httpx.post(
            f"{active.url}/signin",
            data={"token": active.admin_token},
            headers={"Origin": active.url},
        )
        assert r.status_code == 303, r.text
        sid = r.cookies["xpupool_session"]
        page = httpx.get(f"{active.url}/submit", cookies={"xpupool_session": sid})
        assert page.status_code == 200, page.text
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        before = httpx.get(f"{active.url}/v1/audit", params={"limit": 1000}, headers=admin)
        assert before.status_code == 200 and before.json(), before.text
        standby = start_standby(
            tmp_path / "b", standby_port, pg_url, ("--cluster", str(CLUSTER_MIXED), *shared)
        )
        until(lambda: "owned by another" in health(standby_url)[1], "the standby")
        assert active.proc is not None
        os.killpg(active.proc.pid, signal.SIGKILL)
        until(lambda: health(standby_url)[0] == 200, "the standby serving", timeout_s=TAKEOVER_S)

        page = httpx.get(f"{standby_url}/submit", cookies={"xpupool_session": sid})
        assert page.status_code == 200, (page.status_code, page.headers.get("location"))
        assert f'name="csrf" value="{csrf}"' in page.text  # the same session, the same secret
        r = httpx.post(f"{standby_url}/v1/tenants", json={"name": "later"}, headers=admin)
        assert r.status_code == 201, r.text
        after = httpx.get(f"{standby_url}/v1/audit", params={"limit": 1000}, headers=admin)
        kept = {e["id"]: e for e in after.json()}
        assert all(kept.get(e["id"]) == e for e in before.json())  # every row, unchanged
        newest = max(e["id"] for e in before.json())
        assert any(e["id"] > newest and "later" in e["target"] for e in after.json())
        r = httpx.post(f"{standby_url}/v1/secrets/rotate-key", headers=admin)
        assert r.status_code == 200, r.text
        assert r.json()["resealed"] == 1  # the secret opened under the shared key
    finally:
        active.kill()
        if standby is not None and standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(10)


def test_a_plane_behind_a_blackhole_gives_the_store_up_at_its_lease_and_never_writes_after(
    tmp_path: Path, pg_url: str
) -> None:
    """Issue 50: a partition that drops packets (connections hang, nothing is refused). The
    active plane's statements and renewals hang, a submission among them; its lease, timed in
    the process, ends anyway: it gives the store up on its own (its log says so, the database
    being silent), the standby takes over, and when the partition heals the submission that
    hung across it is refused and stored nowhere, and the old plane answers 503 from then on."""
    url = make_url(pg_url)
    relay = TcpProxy((str(url.host), int(url.port or 5432)))
    through_relay = url.set(port=relay.port).render_as_string(hide_password=False)
    active = ServerProc(
        tmp_path / "a", cluster=CLUSTER_MIXED, extra_args=("--db", through_relay, "--no-agent")
    )
    standby_url = ""
    standby: subprocess.Popen[bytes] | None = None
    hung: list[httpx.Response | Exception] = []
    try:
        active.start()
        with active.tenant_client("team") as team:
            token = team.headers["Authorization"].split()[1]
            assert team.post("/v1/jobs", json=JOB).status_code == 201
        port = free_port()
        standby_url = f"http://127.0.0.1:{port}"
        standby = start_standby(tmp_path / "b", port, pg_url)
        until(lambda: "owned by another" in health(standby_url)[1], "the standby")
        relay.stall()

        def submit() -> None:  # hangs with the partition
            try:
                hung.append(
                    httpx.post(
                        f"{active.url}/v1/jobs",
                        json={**JOB, "name": "across-the-partition"},
                        headers=active.headers(token),
                        timeout=300,
                    )
                )
            except Exception as exc:  # recorded, asserted below
                hung.append(exc)

        across = threading.Thread(target=submit, daemon=True)
        across.start()
        # a token the plane has not seen yet is read from the store, which does not answer: on
        # the event loop that read stopped every request (issue 50)
        unseen: list[httpx.Response | Exception] = []

        def ask_unseen() -> None:
            try:
                unseen.append(
                    httpx.get(
                        f"{active.url}/v1/jobs", headers=active.headers("unseen"), timeout=300
                    )
                )
            except Exception as exc:  # recorded, asserted below
                unseen.append(exc)

        early = threading.Thread(target=ask_unseen, daemon=True)
        early.start()
        # the submission hangs in the store holding the plane's lock; the plane still answers
        # (the scheduling pass, on the event loop, used to wait for that lock, and every request
        # with it) and says why
        answered = httpx.get(f"{active.url}/healthz", timeout=ANSWER_S)
        assert answered.status_code in (200, 503), answered.text
        until(
            lambda: "has not answered" in httpx.get(f"{active.url}/healthz", timeout=ANSWER_S).text,
            "/healthz saying the store is stalled",
        )
        r = httpx.get(f"{active.url}/v1/jobs/1", headers=active.headers(token), timeout=ANSWER_S)
        assert r.status_code == 503 and "has not answered" in r.text, r.text
        r = httpx.post(
            f"{active.url}/v1/jobs", json=JOB, headers=active.headers(token), timeout=ANSWER_S
        )
        assert r.status_code == 503 and "store" in r.text, r.text  # not queued behind the lock
        # while stalled, a token never seen and an agent's log upload are refused at once
        r = httpx.get(
            f"{active.url}/v1/jobs", headers=active.headers("never-seen"), timeout=ANSWER_S
        )
        assert r.status_code == 503 and "has not answered" in r.text, r.text
        r = httpx.post(
            f"{active.url}/v1/agent/nodes/n1/jobs/1/replicas/0/logs",
            content=b"output\n",
            headers=active.headers(),
            timeout=ANSWER_S,
        )
        assert r.status_code == 503 and "has not answered" in r.text, r.text
        assert httpx.get(f"{active.url}/healthz", timeout=ANSWER_S).status_code == 503
        until(lambda: health(standby_url)[0] == 200, "the standby serving", timeout_s=TAKEOVER_S)
        log = tmp_path / "a" / "server.log"
        until(
            lambda: "past its lease" in log.read_text(),
            "the active plane giving the store up on its own clock",
        )
        r = httpx.post(f"{standby_url}/v1/jobs", json=JOB, headers=active.headers(token))
        assert r.status_code == 201, r.text
        answered = httpx.get(f"{active.url}/healthz", timeout=ANSWER_S)  # still stalled
        assert answered.status_code == 503 and "lost the store" in answered.text, answered.text
        relay.resume()
        across.join(TAKEOVER_S * 2)
        early.join(TAKEOVER_S * 2)
        assert hung and isinstance(hung[0], httpx.Response), hung
        # the read that hung with the partition is answered once it heals: the token is unknown
        # (the store answered) or the store is refused (the plane gave it up)
        assert unseen and isinstance(unseen[0], httpx.Response), unseen
        assert unseen[0].status_code in (401, 503), unseen[0].text
        assert hung[0].status_code == 503, hung[0].text
        status, text = health(active.url)
        assert status == 503 and "lost the store" in text, (status, text)
        r = httpx.post(f"{active.url}/v1/jobs", json=JOB, headers=active.headers(token))
        assert r.status_code == 503, r.text
        listed = httpx.get(
            f"{standby_url}/v1/jobs", params={"limit": 1000}, headers=active.headers(), timeout=10
        ).json()
        assert "across-the-partition" not in {j["name"] for j in listed}
        assert len(listed) == 2  # one before the partition, one on the new plane
    finally:
        relay.resume()
        active.kill()
        relay.close()
        if standby is not None and standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(10)
