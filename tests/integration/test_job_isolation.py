"""What a tenant's job can see and do, against a real ``xpupool up --cluster cluster-mixed.yaml``
with its in-process agent running real job processes (issue 27, items 1, 2 and 4).

Each test is one finding of the hostile-tenant review: the job ran as the server's user with its
environment, inside the data dir, could read the admin token, the database and another tenant's
logs (and forge lines into them), and nothing limited its CPU, memory or output. The data dir sits
in a directory every user may pass through (as ``--data /srv/xpupool`` would), so what protects it
is the server's own modes, not the test's temporary directory. When the tests run as root (CI),
jobs run under per-tenant uids; the uid checks need root and say so.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import CLUSTER_MIXED, ServerProc, until

CANARY = "XPUPOOL_TEST_CANARY"
UID_FIRST, UID_LAST = 200000, 299999
ROOT = os.geteuid() == 0


@dataclass
class Iso:
    srv: ServerProc
    data: Path
    alpha: httpx.Client
    beta: httpx.Client

    def submit(
        self, who: httpx.Client, command: list[str], spec: str, env: dict[str, str] | None = None
    ) -> int:
        body: dict[str, Any] = {"command": command, "spec": spec, "env": env or {}}
        r = who.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def wait_done(self, who: httpx.Client, job_id: int, timeout_s: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = who.get(f"/v1/jobs/{job_id}").json()
            if job["state"] in ("succeeded", "failed", "cancelled", "lost"):
                return dict(job)
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} not done: {job}\n{self.srv.log()}")

    def log(self, who: httpx.Client, job_id: int) -> str:
        return who.get(f"/v1/jobs/{job_id}/logs").text

    def run(
        self, who: httpx.Client, script: str, spec: str = "cpu=100m", **env: str
    ) -> tuple[dict[str, Any], str]:
        """Run ``sh -c script`` to its end; its job and its whole log."""
        job_id = self.submit(who, ["sh", "-c", script], spec, env)
        job = self.wait_done(who, job_id)
        deadline = time.monotonic() + 10
        text = self.log(who, job_id)
        while "END-OF-JOB" in script and "END-OF-JOB" not in text and time.monotonic() < deadline:
            time.sleep(0.1)
            text = self.log(who, job_id)
        return job, text

    def agent_log(self, job: dict[str, Any]) -> Path:
        """The agent's own copy of replica 0's log (on whichever node it ran), kept once the
        server has the run's result (the agent moves it there right after that heartbeat)."""
        found = until(
            lambda: sorted((self.data / "agent").glob(f"*/logs/{job['id']}-0-*.log")),
            f"the agent's log of job {job['id']}",
            10,
        )
        return found[-1]


@pytest.fixture(scope="module")
def iso() -> Iterator[Iso]:
    # the data dir's parent lets everyone through, as /srv or /var/lib would (not under /tmp,
    # which a job has its own of: the data dir's modes are what is tested)
    parent = Path(tempfile.mkdtemp(prefix="xpupool-iso-", dir="/var/lib"))
    os.chmod(parent, 0o755)
    data = parent / "data"
    os.environ[CANARY] = "leaked-from-the-server"
    srv = ServerProc(
        data,
        cluster=CLUSTER_MIXED,
        agent=True,
        extra_args=("--heartbeat", "0.2", "--lost-after", "10"),
    )
    clients: list[httpx.Client] = []
    try:
        srv.start()
        os.environ.pop(CANARY, None)
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        clients.append(admin)
        users = []
        for name in ("alpha", "beta"):
            admin.post("/v1/tenants", json={"name": name}).raise_for_status()
            r = admin.post(f"/v1/tenants/{name}/tokens", json={"role": "tenant"})
            r.raise_for_status()
            users.append(httpx.Client(base_url=srv.url, headers=srv.headers(r.json()["token"])))
        clients += users
        yield Iso(srv, data, users[0], users[1])
    finally:
        os.environ.pop(CANARY, None)
        for c in clients:
            c.close()
        srv.stop()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.skipif(not ROOT, reason="only a root agent can run jobs under other uids")
def test_each_tenant_runs_under_its_own_uid(iso: Iso) -> None:
    ids = {}
    for name, who in (("alpha", iso.alpha), ("beta", iso.beta)):
        job, text = iso.run(who, "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); echo END-OF-JOB")
        assert job["state"] == "succeeded", (job, text)
        fields = dict(kv.split("=", 1) for kv in text.split("\n", 1)[0].split(" ", 2))
        uid = int(fields["uid"])
        assert UID_FIRST <= uid <= UID_LAST, text
        assert uid != os.geteuid()
        assert fields["gid"] == str(uid) and fields["groups"] == str(uid)  # no extra groups
        ids[name] = uid
    assert ids["alpha"] != ids["beta"]
    # stable: the same tenant gets the same uid again
    job, text = iso.run(iso.alpha, "echo uid=$(id -u); echo END-OF-JOB")
    assert f"uid={ids['alpha']}" in text


def test_the_environment_is_clean_and_the_directory_private(iso: Iso) -> None:
    script = 'env; echo "PWD=$(pwd)"; ls -ld "$(pwd)"; echo END-OF-JOB'
    job, text = iso.run(iso.alpha, script, "A100", MY_SETTING="mine")
    assert job["state"] == "succeeded", (job, text)
    assert CANARY not in text  # nothing of the server's environment
    env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and " " not in line)
    assert env["MY_SETTING"] == "mine"  # the job's own env
    assert env["CUDA_VISIBLE_DEVICES"] and env["XPUPOOL_JOB_ID"] == str(job["id"])  # devices
    assert env["PATH"] and env["LANG"]
    assert "XPUPOOL_TOKEN" not in env
    workdir = Path(env["PWD"])
    assert env["HOME"] == str(workdir) and env["TMPDIR"].startswith(str(workdir))
    assert iso.data.resolve() not in workdir.parents  # outside the data dir
    perms = next(line for line in text.splitlines() if line.startswith("d"))
    assert perms.startswith("drwx------"), perms
    assert not workdir.exists()  # scratch: gone with the replica


def test_data_files_are_private_from_the_first_write(iso: Iso) -> None:
    job, _ = iso.run(iso.alpha, "echo something to log; echo END-OF-JOB")
    assert job["state"] == "succeeded"
    assert stat.S_IMODE(iso.data.stat().st_mode) == 0o700
    names = ["admin-token", "state.db", "state.db-wal", "state.db-shm"]
    for name in names:
        path = iso.data / name
        if name == "state.db-shm" and not path.exists():
            continue
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    logs = list((iso.data / "logs").rglob("*")) + list((iso.data / "agent").rglob("*"))
    assert any(p.is_file() for p in logs)
    for path in logs:
        want = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == want, path


def test_a_job_cannot_read_secrets_or_another_tenants_logs(iso: Iso) -> None:
    beta_job, beta_text = iso.run(
        iso.beta, 'echo "beta says $BETA_SECRET"; echo END-OF-JOB', BETA_SECRET="s3cr3t-b"
    )
    assert "beta says s3cr3t-b" in beta_text
    beta_server_log = iso.data / "logs" / str(beta_job["id"]) / "0.log"
    beta_agent_log = iso.agent_log(beta_job)
    assert beta_server_log.exists()
    data = iso.data.resolve()
    assert iso.srv.proc is not None
    targets = {
        "token-relative": "../../../../admin-token",  # the path from the old run directory
        "token-relative-here": f"$(realpath -m --relative-to=. {data}/admin-token)",
        "token-absolute": f"{data}/admin-token",
        "database": f"{data}/state.db",
        "database-wal": f"{data}/state.db-wal",
        "init-environ": "/proc/1/environ",
        "server-environ": f"/proc/{iso.srv.proc.pid}/environ",
        "beta-log": str(beta_server_log),
        "beta-agent-log": str(beta_agent_log),
    }
    lines = [
        f'if cat "{path}" >/dev/null 2>&1; then echo "READ {name}"; else echo "DENIED {name}"; fi'
        for name, path in targets.items()
    ]
    for name, path in (("beta-log", beta_server_log), ("beta-agent-log", beta_agent_log)):
        lines.append(
            f'if echo "forged by alpha" >> "{path}" 2>/dev/null; then echo "WROTE {name}";'
            f' else echo "DENIED write {name}"; fi'
        )
    lines.append(
        f'if ls "{data}" >/dev/null 2>&1; then echo "READ listing"; else echo "DENIED listing"; fi'
    )
    lines.append("echo END-OF-JOB")
    job, text = iso.run(iso.alpha, "\n".join(lines))
    assert job["state"] == "succeeded", (job, text)
    assert "READ" not in text and "WROTE" not in text, text
    assert text.count("DENIED") == len(targets) + 3, text
    assert "forged" not in iso.log(iso.beta, beta_job["id"])  # beta sees its own output only


def _cgroup_version() -> int | None:
    """Which hierarchy the agent can use here, found independently of the code under test."""
    root = Path("/sys/fs/cgroup")
    controllers = root / "cgroup.controllers"
    if controllers.exists() and {"memory", "cpu"} <= set(controllers.read_text().split()):
        return 2 if os.access(root, os.W_OK) else None
    if (root / "memory" / "memory.limit_in_bytes").exists() and (root / "cpu").exists():
        return 1 if os.access(root / "memory", os.W_OK) else None
    return None


LIMITS_SCRIPT = r"""
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  p=$(grep '^0::' /proc/self/cgroup | cut -d: -f3)
  echo "memory=$(cat /sys/fs/cgroup$p/memory.max)"
  echo "cpu=$(cat /sys/fs/cgroup$p/cpu.max | tr ' ' /)"
else
  m=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3)
  c=$(grep -E '^[0-9]+:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3)
  echo "memory=$(cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes)"
  echo "cpu=$(cat /sys/fs/cgroup/cpu$c/cpu.cfs_quota_us)/$(cat /sys/fs/cgroup/cpu$c/cpu.cfs_period_us)"
fi
echo END-OF-JOB
"""


def test_cpu_and_memory_asked_for_are_enforced(iso: Iso) -> None:
    version = _cgroup_version()
    job, text = iso.run(iso.alpha, LIMITS_SCRIPT, "cpu=500m memory=256Mi")
    assert job["state"] == "succeeded", (job, text)
    events = [e["reason"] for e in job["events"]]
    if version is None:
        assert "replica 0: limits: none (cgroups not writable)" in events, events
        return
    said = f"replica 0: limits: cgroup v{version} memory=256Mi cpu=500m pids=16384"
    assert said in events, events
    assert f"memory={256 << 20}" in text, text
    assert "cpu=50000/100000" in text, text


def test_a_memory_hog_is_stopped_at_its_limit(iso: Iso) -> None:
    if _cgroup_version() is None:
        pytest.fail("no writable cgroup hierarchy on this host: memory limits cannot be tested")
    hog = "x = []\nfor _ in range(1024):\n    x.append(b'x' * (1 << 20))\nprint('survived 1 GiB')\n"
    job_id = iso.submit(iso.alpha, [JOB_PYTHON, "-c", hog], "cpu=1 memory=128Mi")
    job = iso.wait_done(iso.alpha, job_id)
    assert job["state"] == "failed", job
    assert "out of memory" in job["reason"] and "memory=128Mi" in job["reason"], job["reason"]
    assert "survived" not in iso.log(iso.alpha, job_id)


def test_a_replicas_log_keeps_its_last_cap_and_the_job_goes_on(iso: Iso) -> None:
    # 70 MB of output, then the job ends on its own: it was neither blocked nor killed at the
    # cap, and the log keeps its last 64 MiB (log_rotation.py), its end included
    job, _ = iso.run(iso.alpha, "head -c 70000000 /dev/zero; echo END-OF-JOB >&2", "cpu=1")
    assert job["state"] == "succeeded", job
    copy = iso.agent_log(job)
    size = copy.stat().st_size
    assert size >= 70_000_000, size  # offsets of the whole output
    assert copy.stat().st_blocks * 512 <= (64 << 20) + (1 << 20)  # the disk holds the cap
    with copy.open("rb") as f:
        f.seek(-100, os.SEEK_END)
        assert f.read().endswith(b"END-OF-JOB\n")


TEMP_SCRIPT = r"""
echo "TMPDIR=$TMPDIR TMP=$TMP TEMP=$TEMP"
echo "marker" > /tmp/xpupool-temp-probe-$1
if [ -f "$TMPDIR/xpupool-temp-probe-$1" ]; then echo "/tmp is TMPDIR"; fi
head -c 209715200 /dev/zero > "$TMPDIR/big" || exit 3
echo "wrote 200 MiB"
echo END-OF-JOB
"""


def test_a_jobs_temp_dir_is_its_own_counted_against_its_memory_and_removed(iso: Iso) -> None:
    """Issue 43 item 12: jobs wrote into the host's /tmp (shared by every tenant) and 200 MiB
    into a $TMPDIR on the disk that no limit counted. A replica's temp dir is its own, at /tmp
    too, gone with it, and with a memory limit it counts against that limit."""
    if not ROOT:
        pytest.fail("only a root agent gives a job a mount namespace: run these tests as root")
    if _cgroup_version() is None:
        pytest.fail("no writable cgroup hierarchy on this host: memory limits cannot be tested")
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    job, text = iso.run(iso.alpha, TEMP_SCRIPT.replace("$1", tag), "cpu=1 memory=512Mi")
    assert job["state"] == "succeeded", (job, text)
    first = text.splitlines()[0]
    tmp = first.split()[0].removeprefix("TMPDIR=")
    assert first == f"TMPDIR={tmp} TMP={tmp} TEMP={tmp}", first
    assert "/tmp is TMPDIR" in text and "wrote 200 MiB" in text, text
    assert not Path(f"/tmp/xpupool-temp-probe-{tag}").exists()  # not the host's /tmp
    assert not Path(tmp).exists()  # gone with the replica
    # the same 200 MiB over a 128 MiB limit: counted, so the job is stopped at its limit (the
    # kernel kills the writer or the shell, or the temp dir, as large as the limit, is full)
    job_id = iso.submit(iso.alpha, ["sh", "-c", TEMP_SCRIPT, "sh", tag], "cpu=1 memory=128Mi")
    job = iso.wait_done(iso.alpha, job_id)
    text = iso.log(iso.alpha, job_id)
    assert job["state"] == "failed" and "wrote 200 MiB" not in text, (job, text)
    assert "out of memory" in job["reason"] or "No space left" in text, (job, text)


SECRET_ARG = "--api-key=TB-SECRET-123"
PEEK = r"""
echo "own=$(ls /proc | grep -c '^[0-9]')"
echo "secret=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' | grep -c 'TB-SECRET-12[3]')"
echo "ps=$(ps -eo args | grep -c 'TB-SECRET-12[3]')"
echo END-OF-JOB
"""


def _command_line_on_host(text: str) -> bool:
    """Some process of the host has ``text`` in its command line (as the host's ``ps`` sees)."""
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in path.read_bytes():
                return True
        except OSError:  # gone meanwhile
            continue
    return False


def test_a_job_on_the_host_back_end_cannot_see_another_tenants_command_line(iso: Iso) -> None:
    """Issue 43 item 13: with the default settings (host back end, bwrap installed or not), a
    job read another tenant's ``--api-key=...`` in ``ps``. Its /proc shows its own uid's only."""
    if not ROOT:
        pytest.fail("only a root agent runs tenants under uids of their own: run as root")
    assert "--sandbox" not in iso.srv.extra_args  # the default back end, which says so
    assert "backend host" in iso.srv.log() and "only its own processes in /proc" in iso.srv.log()
    holder = iso.submit(iso.beta, ["sh", "-c", "sleep 60", SECRET_ARG], "cpu=100m")
    until(lambda: _command_line_on_host(SECRET_ARG), "beta's process with its secret", 30)
    try:
        job, text = iso.run(iso.alpha, PEEK)
    finally:
        iso.beta.post(f"/v1/jobs/{holder}/cancel")
    assert job["state"] == "succeeded", (job, text)
    seen = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert int(seen["own"]) >= 1, text  # its own processes are there
    assert (seen["secret"], seen["ps"]) == ("0", "0"), text
    held = iso.wait_done(iso.beta, holder)
    assert held["state"] == "cancelled" and held["reason"] == "cancelled by user", held
