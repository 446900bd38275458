"""Image pulls on a real engine from a real registry (issue 45, part 3): Debian's
``docker-registry`` (distribution v2) on 127.0.0.1, the busybox test image pushed to it by the
test (nothing comes from the internet), and a real ``xpupool up`` whose agent pulls with podman.

Checked: a job whose image is only in the registry runs, its log shows the pull (``pulling``,
podman's ``Copying blob`` lines) and its events ``pulled IMAGE in N s``; a missing tag fails the
job ``ErrImagePull: image not found``; a registry nobody listens on, ``registry unreachable``; a
registry that accepts and never answers, ``timed out`` after the agent's ``--pull-timeout``. The
registries are plain HTTP: the agent's podman is told so the operator's way, by a registries.conf
(``CONTAINERS_REGISTRIES_CONF`` in the agent's environment, which the runtime client keeps).
In CI the registry is installed by .ci/run: a missing registry fails these tests.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_proc import ServerProc
from test_container_engine import Engine

from container_images import busybox_image, podman, require_podman

__all__ = ["busybox_image"]  # a fixture, used by name

CLUSTER = """\
nodes:
  - {name: box, cpu: 4, memory: 8Gi, runtime: podman}
"""
PULL_TIMEOUT_S = 6
REGISTRY_CONFIG = """\
version: 0.1
log: {{level: warn}}
storage:
  filesystem: {{rootdirectory: {root}}}
http:
  addr: 127.0.0.1:{port}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"docker-registry exited: {log.read_text()[-2000:]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"docker-registry not listening on {port}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a registry of our own (Debian's docker-registry)."""
    require_podman()
    binary = shutil.which("docker-registry")
    assert binary, "docker-registry is needed (Debian: apt-get install docker-registry)"
    tmp = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = tmp / "config.yml"
    config.write_text(REGISTRY_CONFIG.format(root=tmp / "store", port=port))
    log = tmp / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=out, stderr=out)
    try:
        _wait_listening(port, proc, log)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def silent_registry() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a registry that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


AUTH_USER, AUTH_PASSWORD = "puller", "pull-pass-7Qm"


class _AuthProxy(http.server.BaseHTTPRequestHandler):
    """The registry behind HTTP basic authentication, as a private registry is: every request
    without the right credentials gets 401 and the challenge; the others are passed on."""

    backend = ""
    expected = "Basic " + base64.b64encode(f"{AUTH_USER}:{AUTH_PASSWORD}".encode()).decode()

    def log_message(self, *_: object) -> None:
        pass

    def _forward(self) -> None:
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="xpupool-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        conn = http.client.HTTPConnection(self.backend, timeout=30)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for key, value in self.headers.items():  # every Accept: a client sends several
            if key.lower() != "authorization":
                conn.putheader(key, value)
        conn.endheaders()
        answer = conn.getresponse()
        body = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        conn.close()

    do_GET = do_HEAD = _forward  # noqa: N815 - the names http.server calls


@pytest.fixture(scope="module")
def private_registry(registry: str) -> Iterator[str]:
    """``127.0.0.1:PORT`` of the test registry behind basic authentication."""
    handler = type("Proxy", (_AuthProxy,), {"backend": registry})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def pushed(registry: str, busybox_image: str) -> Iterator[str]:
    """The busybox image in the registry, and not in the engine's store under that name (nor
    left there afterwards: the registry's port, part of the name, is new each run)."""
    image = f"{registry}/xpupool-test/busybox:pushed"
    done = podman("push", "--tls-verify=false", busybox_image, f"docker://{image}", timeout_s=120)
    assert done.returncode == 0, done.stderr
    podman("rmi", "-f", image)
    yield image
    podman("rmi", "-f", image)


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory,
    registry: str,
    silent_registry: str,
    private_registry: str,
) -> Iterator[Engine]:
    """``xpupool up`` on podman, told that the test's registries speak plain HTTP."""
    tmp = tmp_path_factory.mktemp("pull-up")
    down = f"127.0.0.1:{_free_port()}"  # nothing listens there
    conf = tmp / "registries.conf"
    conf.write_text(
        "".join(
            f'[[registry]]\nlocation = "{r}"\ninsecure = true\n\n'
            for r in (registry, silent_registry, private_registry, down)
        )
    )
    (tmp / "cluster.yaml").write_text(CLUSTER)
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    env["CONTAINERS_REGISTRIES_CONF"] = str(conf)
    srv = ServerProc(
        tmp / "data",
        cluster=tmp / "cluster.yaml",
        agent=True,
        extra_args=("--heartbeat", "0.2", "--pull-timeout", str(PULL_TIMEOUT_S)),
        env=env,
    )
    with srv:
        user = srv.tenant_client("mallory")
        try:
            yield Engine(srv, user, down)
        finally:
            user.close()


def _run(engine: Engine, image: str, **body: object) -> tuple[dict[str, object], str]:
    r = engine.submit({"image": image, "command": ["sh", "-c", "echo ran-from-registry"], **body})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    return job, engine.logs(int(job["id"]))  # type: ignore[call-overload]


def test_an_image_only_in_the_registry_is_pulled_and_the_pull_is_shown(
    engine: Engine, pushed: str
) -> None:
    job, text = _run(engine, pushed)
    assert job["state"] == "succeeded", (job, text)
    assert "ran-from-registry" in text, text
    assert f"pulling {pushed}" in text and "Copying blob" in text, text
    events = [e["reason"] for e in job["events"]]  # type: ignore[attr-defined]
    assert any(f"pulled {pushed} in " in e and "1 layers" in e for e in events), events
    # present now: the next job of it (if-not-present, the default) does not pull again
    job, text = _run(engine, pushed)
    assert job["state"] == "succeeded", (job, text)
    assert f"pulling {pushed}" not in text, text
    events = [e["reason"] for e in job["events"]]  # type: ignore[attr-defined]
    assert any("image present; limits" in e for e in events), events


def test_pull_always_pulls_a_present_image_again_and_the_job_shows_its_policy(
    engine: Engine, pushed: str
) -> None:
    _run(engine, pushed)  # present now, whichever test ran first
    job, text = _run(engine, pushed, pull="always")
    assert job["state"] == "succeeded", (job, text)
    assert job["pull"] == "always", job
    assert f"pulling {pushed}" in text, text


def test_pull_never_fails_a_missing_image_without_asking_the_registry(
    engine: Engine, registry: str
) -> None:
    image = f"{registry}/xpupool-test/busybox:pushed-never"
    job, text = _run(engine, image, pull="never")
    assert job["state"] == "failed", (job, text)
    assert f"ErrImageNeverPull: image not present: {image}" in str(job["reason"]), job
    assert "pulling" not in text, text


def test_the_cli_submits_a_pull_policy_and_shows_it(
    engine: Engine, pushed: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from xpupool.cli import main

    env = {
        "XPUPOOL_URL": engine.srv.url,
        "XPUPOOL_TOKEN": engine.user.headers["Authorization"].removeprefix("Bearer "),
        "HOME": str(tmp_path),
        "XPUPOOL_CONFIG": None,
        "COLUMNS": "200",
    }
    argv = ["submit", "cpu=100m", "--image", pushed, "--pull", "always", "-o", "json", "--"]
    done = CliRunner().invoke(main, [*argv, "sh", "-c", "true"], env=env)  # type: ignore[arg-type]
    assert done.exit_code == 0, done.output
    job = engine.finished(json.loads(done.output)["id"])
    assert job["state"] == "succeeded" and job["pull"] == "always", job
    shown = CliRunner().invoke(main, ["job", str(job["id"])], env=env)  # type: ignore[arg-type]
    assert shown.exit_code == 0, shown.output
    assert any(line.split()[:2] == ["pull", "always"] for line in shown.output.splitlines()), (
        shown.output
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"image": "busybox", "pull": "sometimes"}, "if-not-present"),
        ({"command": ["true"], "pull": "always"}, "no image"),
    ],
)
def test_a_pull_policy_is_checked_at_the_edge(
    engine: Engine, body: dict[str, object], why: str
) -> None:
    r = engine.submit(body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "pull", r.json()
    assert why in r.json()["reason"], r.json()


def test_a_missing_tag_fails_the_job_image_not_found(engine: Engine, registry: str) -> None:
    image = f"{registry}/xpupool-test/busybox:no-such-tag"
    job, text = _run(engine, image)
    assert job["state"] == "failed", (job, text)
    assert f"ErrImagePull: image not found: {image}" in str(job["reason"]), (job, text)


def test_a_registry_that_is_down_fails_the_job_registry_unreachable(engine: Engine) -> None:
    image = f"{engine.image}/xpupool-test/busybox:any"  # engine.image: the down registry
    job, text = _run(engine, image)
    assert job["state"] == "failed", (job, text)
    assert f"ErrImagePull: registry unreachable: {image}" in str(job["reason"]), (job, text)


def test_a_registry_that_never_answers_fails_the_job_at_the_pull_timeout(
    engine: Engine, silent_registry: str
) -> None:
    image = f"{silent_registry}/xpupool-test/busybox:any"
    start = time.monotonic()
    job, text = _run(engine, image)
    assert job["state"] == "failed", (job, text)
    assert f"ErrImagePull: timed out: {image}" in str(job["reason"]), (job, text)
    assert f"no image after {PULL_TIMEOUT_S} s" in str(job["reason"]), job
    assert time.monotonic() - start < PULL_TIMEOUT_S + 60
    # while it hung, the pull was in the job's events (the agent's starting report), not only
    # in its log
    events = [e["reason"] for e in job["events"]]  # type: ignore[attr-defined]
    assert f"replica 0: pulling {image}" in events, events


def test_a_private_registry_is_pulled_from_with_the_jobs_pull_secret(
    engine: Engine, pushed: str, private_registry: str, registry: str
) -> None:
    """Issue 45 part 3 and issue 48: registry credentials are a tenant's secret, given to the
    pull alone; without them the pull fails ``unauthorised``; they reach no file of the server's
    or the agent's and no answer."""
    image = pushed.replace(registry, private_registry, 1)
    token = base64.b64encode(f"{AUTH_USER}:{AUTH_PASSWORD}".encode()).decode()
    auth = json.dumps({"auths": {private_registry: {"auth": token}}})
    r = engine.user.put("/v1/secrets/registry", json={"secret": auth})
    assert r.status_code in (200, 201), r.text
    refused = engine.submit({"image": image, "command": ["true"], "pull_secret": "nope"})
    assert refused.status_code == 422 and refused.json()["field"] == "pull_secret", refused.text
    job, text = _run(engine, image, pull="always")
    assert job["state"] == "failed", (job, text)
    assert f"ErrImagePull: unauthorised: {image}" in str(job["reason"]), (job, text)
    job, text = _run(engine, image, pull="always", pull_secret="registry")
    assert job["state"] == "succeeded", (job, text)
    assert "ran-from-registry" in text and "with its pull secret" in text, text
    assert job["pull_secret"] == "registry", job
    for path in engine.srv.data.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert AUTH_PASSWORD.encode() not in data and token.encode() not in data, path
    assert token not in engine.user.get(f"/v1/jobs/{job['id']}").text
