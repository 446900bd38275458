"""Image jobs on a real container engine: Debian's podman, driven by a real ``xpupool up`` and its
in-process agent (issue 43, item 2; issue 45, part 1).

The image is the shared busybox test image (tests/container_images.py: built locally with ``podman
import``, nothing is pulled). Podman runs with the product's defaults: whatever this machine needs
(runc on its hybrid cgroups, the cgroupfs manager, ulimits below the hard limits) the agent
detects (agent/launch/runtime_config.py); the tests configure nothing.

Checked here, each on the real engine: the job's uid and gid, its environment (the env file: the
job's variables, none of the agent's, the file gone afterwards), its working directory, the limits
read back from the container's cgroup (memory, CPU quota, pids), its output and exit codes, and
a gang of images reaching its master over MASTER_ADDR:MASTER_PORT on either network policy
(``--network bridge``, the default, and ``host``). The lifecycle (stop with grace, an agent
restarting, leftovers) is in test_container_lifecycle.py.

The exploit: ``{"image": "--privileged", "command": ["--user=0:0", "--volume=/:/host", IMAGE,
"chroot", "/host", "id"]}`` was accepted and the agent's ``podman run ... --privileged
--user=0:0 --volume=/:/host IMAGE chroot /host id`` ran as root with the host's ``/`` mounted.
In CI podman is installed by .ci/run: a missing engine fails these tests.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, until

from container_images import busybox_image, require_podman

__all__ = ["busybox_image"]  # a fixture, used by name

CLUSTER = """\
nodes:
  - {name: box, cpu: 4, memory: 8Gi, runtime: podman}
"""
ROOT = os.geteuid() == 0


@dataclass
class Engine:
    srv: ServerProc
    user: httpx.Client
    image: str

    def submit(self, body: dict[str, Any]) -> httpx.Response:
        return self.user.post("/v1/jobs", json={"spec": "cpu=100m", **body})

    def finished(self, job_id: int) -> dict[str, Any]:
        return dict(
            until(
                lambda: (
                    (j := self.user.get(f"/v1/jobs/{job_id}").json())["state"]
                    in ("succeeded", "failed", "cancelled", "lost")
                    and j
                ),
                f"job {job_id} to end ({self.srv.log()[-3000:]})",
                120,
            )
        )

    def logs(self, job_id: int) -> str:
        return self.user.get(f"/v1/jobs/{job_id}/logs").text


def _engine(tmp_path_factory: pytest.TempPathFactory, image: str, *extra: str) -> Iterator[Engine]:
    """``xpupool up`` with its in-process agent on podman, ``extra`` its options."""
    require_podman()
    tmp = tmp_path_factory.mktemp("podman-up")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONTAINERS_CONF", raising=False)  # the product's defaults, nothing of ours
        srv = ServerProc(
            tmp / "data", cluster=cluster, agent=True, extra_args=("--heartbeat", "0.2", *extra)
        )
        with srv:
            user = srv.tenant_client("mallory")
            try:
                yield Engine(srv, user, image)
            finally:
                user.close()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, busybox_image: str) -> Iterator[Engine]:
    yield from _engine(tmp_path_factory, busybox_image)


@pytest.fixture(scope="module")
def host_engine(tmp_path_factory: pytest.TempPathFactory, busybox_image: str) -> Iterator[Engine]:
    """Image replicas on the host's network (``--network host``)."""
    yield from _engine(tmp_path_factory, busybox_image, "--network", "host")


def test_an_image_job_runs_on_podman_as_the_tenant(engine: Engine) -> None:
    r = engine.submit({"image": engine.image, "command": ["sh", "-c", "id -u; echo inside"]})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    assert job["state"] == "succeeded", (job, engine.logs(job["id"]))
    text = engine.logs(job["id"])
    assert "inside" in text
    uid = text.split()[0]
    assert uid != "0", text  # never the image's root
    if ROOT:
        assert int(uid) >= 200000, text  # the tenant's uid of the job uid range


def test_an_image_that_is_a_runtime_option_is_refused_and_nothing_runs_as_root(
    engine: Engine,
) -> None:
    hostile = {
        "image": "--privileged",
        "command": [
            "--user=0:0",
            "--volume=/:/host",
            engine.image,
            "chroot",
            "/host",
            "/usr/bin/id",
        ],
    }
    r = engine.submit(hostile)
    if r.status_code == 201:  # what it did before: say how far it got
        job = engine.finished(r.json()["id"])
        pytest.fail(f"accepted; it ended {job['state']}: {engine.logs(job['id'])[-500:]}")
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image"
    assert "not an image reference" in r.json()["reason"]


def test_options_in_the_command_stay_the_containers_arguments(engine: Engine) -> None:
    """A well-formed image with runtime options as its command: the runtime must not read them
    (the image comes after every option and '--'), so the container runs ``--privileged`` as a
    program, which does not exist, and nothing runs as root."""
    r = engine.submit({"image": engine.image, "command": ["--privileged", "--user=0:0", "id"]})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    assert job["state"] == "failed", (job, engine.logs(job["id"]))
    assert "uid=0" not in engine.logs(job["id"])


def _run(engine: Engine, script: str, **body: Any) -> tuple[dict[str, Any], str]:
    r = engine.submit({"image": engine.image, "command": ["sh", "-c", script], **body})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    return job, engine.logs(job["id"])


def _values(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of a job's output."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_job_runs_as_its_uid_and_gid_never_root(engine: Engine) -> None:
    job, text = _run(engine, "echo uid=$(id -u); echo gid=$(id -g)")
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["uid"] == got["gid"] != "0", text
    if ROOT:
        assert int(got["uid"]) >= 200000, text


def test_the_environment_is_the_jobs_own_through_a_file_that_goes(engine: Engine) -> None:
    script = "echo my=$MY_VAR; echo token=${XPUPOOL_TOKEN-unset}; echo node=$XPUPOOL_NODE"
    job, text = _run(engine, script, env={"MY_VAR": "has spaces = and equals"})
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["my"] == "has spaces = and equals", text
    assert got["token"] == "unset", text  # nothing of the agent's environment
    assert got["node"] == "box", text
    assert not list(engine.srv.data.rglob("*.env")), "the env file outlived its container"


def test_the_working_directory_is_the_replicas_private_one(engine: Engine) -> None:
    script = "echo pwd=$(pwd); echo home=$HOME; touch mine && echo wrote=yes; stat -c mode=%a ."
    job, text = _run(engine, script)
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["pwd"] == got["home"], text
    assert Path(got["pwd"]).name.startswith(f"box-{job['id']}-0-"), text
    assert got["wrote"] == "yes" and got["mode"] == "700", text
    assert not Path(got["pwd"]).exists()  # removed with the container


# the container's own cgroup, v1 (a directory per controller) or v2 (one directory)
CGROUP_LIMITS = """
r() { cat "$1" 2>/dev/null || cat "$2"; }
echo memory=$(r /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max)
echo cpu=$(r /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max)
echo pids=$(r /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max)
"""


def test_limits_are_read_back_from_the_containers_cgroup(engine: Engine) -> None:
    job, text = _run(engine, CGROUP_LIMITS, spec="cpu=500m memory=64Mi")
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["memory"] == str(64 << 20), text
    assert got["cpu"].split()[0] == "50000", text  # 0.5 CPU of a 100000 us period
    assert got["pids"] == "16384", text  # the agent's --pids-limit default


def test_output_and_exit_codes(engine: Engine) -> None:
    job, text = _run(engine, "echo to-stdout; echo to-stderr >&2; exit 0")
    assert job["state"] == "succeeded" and job["exit_code"] == 0, job
    assert "to-stdout" in text and "to-stderr" in text, text
    job, text = _run(engine, "echo failing; exit 3")
    assert job["state"] == "failed" and job["exit_code"] == 3, job
    assert "exited with 3" in job["reason"], job
    assert "failing" in text, text


# replica 0 serves one line on MASTER_PORT; replica 1 connects to MASTER_ADDR:MASTER_PORT
GANG = """
if [ "$RANK" = 0 ]; then
  echo hello-from-rank-0 | nc -l -p "$MASTER_PORT" && echo served
else
  i=0
  while [ $i -lt 100 ]; do
    got=$(nc -w 2 "$MASTER_ADDR" "$MASTER_PORT" </dev/null 2>/dev/null)
    case "$got" in *hello-from-rank-0*) echo "reached $MASTER_ADDR:$MASTER_PORT"; exit 0;; esac
    i=$((i+1)); sleep 0.2
  done
  echo "cannot reach $MASTER_ADDR:$MASTER_PORT"; exit 1
fi
"""


def _gang(engine: Engine) -> list[str]:
    """Runs :data:`GANG`; its job's events (what the agent reported of each replica)."""
    job, _ = _run(engine, GANG, spec="cpu=100m replicas=2")
    served, reached = (
        engine.user.get(f"/v1/jobs/{job['id']}/logs", params={"replica": r}).text for r in (0, 1)
    )
    assert job["state"] == "succeeded", (job["reason"], served, reached)
    assert "served" in served and "reached" in reached, (served, reached)
    return [e["reason"] for e in job["events"]]


def test_a_gang_of_images_reaches_its_master(engine: Engine) -> None:
    """Issue 45 part 2, seen failing first: replica 0 listened on the bridge network unpublished
    and replica 1 dialled the node's loopback from its own ('cannot reach 127.0.0.1:29501').
    Now the master port is published as itself and a loopback master is the host's name."""
    events = _gang(engine)
    assert any("network bridge, ports 29" in e for e in events), events


def test_a_gang_of_images_reaches_its_master_on_the_host_network(host_engine: Engine) -> None:
    events = _gang(host_engine)
    assert any("network host, ports 29" in e for e in events), events


def test_a_secret_reaches_the_container_as_a_file_and_a_variable(engine: Engine) -> None:
    value = "registry-secret-9Kq2"
    assert engine.user.put("/v1/secrets/token", json={"secret": value}).status_code in (200, 201)
    script = (
        'echo dir=$XPUPOOL_SECRETS_DIR; echo file=$(sha256sum < "$XPUPOOL_SECRETS_DIR/token"); '
        'echo var=$(printf %s "$TOKEN" | sha256sum); '
        'echo mode=$(stat -c %a "$XPUPOOL_SECRETS_DIR/token"); '
        'echo ro=$(touch "$XPUPOOL_SECRETS_DIR/x" 2>/dev/null && echo no || echo yes)'
    )
    job, text = _run(engine, script, secrets=[{"name": "token", "env": "TOKEN"}])
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["dir"] == "/run/secrets", text
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert got["file"].split()[0] == got["var"].split()[0] == digest, text
    assert got["mode"] == "400" and got["ro"] == "yes", text
    # the value never reached the data dir (the env file of the job's own env is there)
    for path in engine.srv.data.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path


def test_a_volume_is_mounted_where_the_job_asked(engine: Engine, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the job's uid writes here (a shared volume: the admin's choice)
    (shared / "hello").write_text("hi\n")
    with httpx.Client(base_url=engine.srv.url, headers=engine.srv.headers()) as admin:
        assert admin.put("/v1/volumes/rw", json={"path": str(shared)}).status_code in (200, 201)
        ro = {"path": str(shared), "read_only": True}
        assert admin.put("/v1/volumes/ro", json=ro).status_code in (200, 201)
    script = (
        "echo seen=$(cat /data/hello); echo x > /data/out && echo wrote=yes; "
        "echo ro=$(touch /ref/y 2>/dev/null && echo no || echo yes); echo env=$XPUPOOL_VOLUME_RW"
    )
    mounts = [{"name": "rw", "path": "/data"}, {"name": "ro", "path": "/ref", "read_only": True}]
    job, text = _run(engine, script, volumes=mounts)
    assert job["state"] == "succeeded", (job, text)
    got = _values(text)
    assert got["seen"] == "hi" and got["wrote"] == "yes" and got["ro"] == "yes", text
    assert got["env"] == "/data", text
    assert (shared / "out").read_text() == "x\n" and not (shared / "y").exists()


def test_an_image_the_engine_cannot_get_fails_the_job_with_the_reason(engine: Engine) -> None:
    """Issue 45: the fake runtime's ``run`` exiting before any container existed left its job
    ``scheduled``. On podman the job did fail, but as ``replica 0 exited with 125`` (podman's
    own code for its own errors, the pull's retries only in the log); the pull is now a step of
    its own whose failure is the reason (test_container_pulls.py has a real registry)."""
    missing = "localhost/xpupool-test/not-built:nope"  # no registry listens on localhost:443
    r = engine.submit({"image": missing, "command": ["true"]})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    assert job["state"] == "failed", job
    assert f"ErrImagePull: registry unreachable: {missing}" in job["reason"], job
    assert f"pulling {missing}" in engine.logs(job["id"])


@pytest.mark.parametrize("ports", [[0], [65536], ["29500"], list(range(29500, 29517))], ids=str)
def test_a_replicas_ports_are_checked_at_the_edge(ports: list[object]) -> None:
    from pydantic import ValidationError

    from xpupool.server.schemas.agent_protocol import ReplicaReport

    report = {"job_id": 1, "replica": 0, "state": "running", "ports": ports}
    with pytest.raises(ValidationError, match="ports"):
        ReplicaReport.model_validate(report)


def test_a_running_image_replica_shows_its_ports_in_the_job_view(engine: Engine) -> None:
    """Issue 45 part 2: the ports were only in the limits event's text; they are a field of
    the job's assignment (``xpupool job ID`` lists them) while it runs."""
    from click.testing import CliRunner

    from xpupool.cli import main

    r = engine.submit({"image": engine.image, "command": ["sh", "-c", "echo port=$PORT; sleep 60"]})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    try:
        job = until(
            lambda: (
                (j := engine.user.get(f"/v1/jobs/{job_id}").json())["assignments"]
                and j["assignments"][0]["ports"]
                and j
            ),
            f"job {job_id} to report its ports",
            60,
        )
        ports = job["assignments"][0]["ports"]
        assert len(ports) == 1 and 29500 <= ports[0] < 30500, job
        token = engine.user.headers["Authorization"].removeprefix("Bearer ")
        env = {"XPUPOOL_URL": engine.srv.url, "XPUPOOL_TOKEN": token, "COLUMNS": "200"}
        shown = CliRunner().invoke(main, ["job", str(job_id)], env=env)
        assert shown.exit_code == 0, shown.output
        assert "ports" in shown.output and str(ports[0]) in shown.output, shown.output
        text = until(lambda: "port=" in (t := engine.logs(job_id)) and t, "its output", 30)
        assert f"port={ports[0]}" in text, text
    finally:
        engine.user.post(f"/v1/jobs/{job_id}/cancel")
    assert engine.finished(job_id)["state"] == "cancelled"


def _node_port(engine: Engine, job_id: int) -> int:
    job = until(
        lambda: (
            (j := engine.user.get(f"/v1/jobs/{job_id}").json())["assignments"]
            and j["assignments"][0]["ports"]
            and j
        ),
        f"job {job_id} to report its port",
        60,
    )
    return int(job["assignments"][0]["ports"][0])


def _read_from(port: int) -> bytes:
    """What the replica's server sends on connecting, once it listens (its start takes a
    moment: a refused connection is tried again)."""

    def once() -> bytes:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                return conn.recv(100)
        except OSError:
            return b""

    return bytes(until(once, f"an answer on node port {port}", 60))


def test_an_images_own_port_is_reached_on_its_node_port(engine: Engine) -> None:
    """Issue 47: a server image listens on its own port (``port: 8000``), published on a node
    port its agent picks; what a caller dials is that node port, as the job's view says."""
    serve = "while true; do echo hello | nc -l -p 8000; done"
    r = engine.submit({"image": engine.image, "command": ["sh", "-c", serve], "port": 8000})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    try:
        port = _node_port(engine, job_id)
        assert port != 8000 and _read_from(port).strip() == b"hello"
    finally:
        engine.user.post(f"/v1/jobs/{job_id}/cancel")
    assert engine.finished(job_id)["state"] == "cancelled"


def test_a_host_process_that_asks_for_a_port_listens_on_port(engine: Engine) -> None:
    """``port: 0`` on a host job: the agent hands it a node port as $PORT (before, only image
    replicas had one, so a served process on the host had nowhere safe to listen)."""
    serve = (
        "import os, socket\n"
        "s = socket.create_server(('0.0.0.0', int(os.environ['PORT'])))\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n"
    )
    r = engine.submit({"command": [JOB_PYTHON, "-c", serve], "port": 0})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    try:
        assert _read_from(_node_port(engine, job_id)) == b"hello"
    finally:
        engine.user.post(f"/v1/jobs/{job_id}/cancel")
    assert engine.finished(job_id)["state"] == "cancelled"


def _queue_with_network(engine: Engine, queue: str, network: str) -> None:
    with httpx.Client(base_url=engine.srv.url, headers=engine.srv.headers()) as admin:
        body = {"name": queue, "tenant": "mallory", "quotas": [], "network": network}
        r = admin.put(f"/v1/queues/{queue}", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["network"] == network


def test_a_queue_asking_for_a_network_the_node_does_not_allow_is_refused(engine: Engine) -> None:
    _queue_with_network(engine, "nccl", "host")
    job, text = _run(engine, "echo ran", queue="nccl")
    assert job["state"] == "failed", (job, text)
    assert "its queue asks for the host network; this node allows only bridge" in job["reason"]


@pytest.fixture(scope="module")
def open_engine(tmp_path_factory: pytest.TempPathFactory, busybox_image: str) -> Iterator[Engine]:
    """Image replicas on the bridge network, but queues may ask for the host's."""
    yield from _engine(tmp_path_factory, busybox_image, "--allow-network", "host")


def test_a_queue_gets_the_host_network_where_the_node_allows_it(open_engine: Engine) -> None:
    _queue_with_network(open_engine, "nccl", "host")
    job, text = _run(open_engine, "echo ran", queue="nccl")
    assert job["state"] == "succeeded", (job, text)
    events = [e["reason"] for e in job["events"]]
    assert any("network host" in e for e in events), events
    plain, _ = _run(open_engine, "echo ran")  # its own queue: the node's network
    assert any("network bridge" in e["reason"] for e in plain["events"]), plain["events"]
