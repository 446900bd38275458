"""A gang of images across two network namespaces (issue 45, part 2): two standalone agents, each
in a network namespace of its own that the test makes (a veth pair per namespace on a bridge of
the host's, one address each), so the only way replica 1 reaches replica 0 is the master node's
address and its published port: a loopback or bridge-internal ``MASTER_ADDR`` would fail.

The agents enter their namespace with ``nsenter --net=/run/netns/NAME`` (not ``ip netns exec``,
which remounts /sys and breaks podman) and are pinned to one CPU each (``taskset``: the agent
counts the CPUs it may use), so that a 2-replica gang of 600m each must take one replica per
node. Needs root (CI runs as root); the image is the shared busybox one; podman runs with the
product's defaults, on the default ``--network bridge``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_proc import ServerProc, stop_process, until
from test_container_engine import GANG

from container_images import busybox_image, require_podman

__all__ = ["busybox_image"]  # a fixture, used by name


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"


@dataclass
class Namespaces:
    names: tuple[str, str]
    addresses: tuple[str, str]
    host: str


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    """Two network namespaces on a bridge of the host's: ``10.213.N.2`` and ``.3``, the host
    ``.1``; removed afterwards (their veth ends go with them)."""
    assert os.geteuid() == 0, "making network namespaces needs root (CI runs as root)"
    tag = f"{os.getpid() % 10000}"
    net = f"10.213.{os.getpid() % 250}"
    bridge, names = f"xpbr{tag}", (f"xpupool-a{tag}", f"xpupool-b{tag}")
    made: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{net}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, name in enumerate(names):
            _ip("netns", "add", name)
            made.append(name)
            outside, inside = f"xpv{i}{tag}", f"xpi{i}{tag}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", name)
            _ip("link", "set", outside, "master", bridge, "up")
            _ip("-n", name, "addr", "add", f"{net}.{i + 2}/24", "dev", inside)
            _ip("-n", name, "link", "set", inside, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "route", "add", "default", "via", f"{net}.1")
        yield Namespaces(names, (f"{net}.2", f"{net}.3"), f"{net}.1")
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False)
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)


def test_a_gang_of_images_reaches_its_master_across_network_namespaces(
    tmp_path: Path, busybox_image: str, namespaces: Namespaces
) -> None:
    require_podman()
    srv = ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2", "--host", "0.0.0.0"))
    agents: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    with srv:
        user = srv.tenant_client("team")
        try:
            env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
            for i, name in enumerate(namespaces.names):
                node = f"ns{i}"
                token = srv.agent_token_file(tmp_path / f"{node}-token", f"{node}-ops")
                argv = ["nsenter", f"--net=/run/netns/{name}", "taskset", "-c", "0"]
                argv += [sys.executable, "-c", "from xpupool.cli import main; main()", "agent"]
                argv += ["--server", f"http://{namespaces.host}:{srv.port}"]
                argv += ["--token-file", str(token), "--node", node, "--runtime", "podman"]
                argv += ["--work-dir", str(tmp_path / f"{node}-work")]
                logs.append(tmp_path / f"{node}.log")
                with logs[-1].open("wb") as out:
                    agents.append(
                        subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
                    )

            def seen() -> str:
                return "\n".join(p.read_text()[-2000:] for p in logs)

            until(lambda: len(user.get("/v1/nodes").json()) == 2, f"two nodes ({seen()})", 90)
            body = {"image": busybox_image, "command": ["sh", "-c", GANG]}
            r = user.post("/v1/jobs", json={**body, "spec": "cpu=600m replicas=2"})
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            job = until(
                lambda: (
                    (j := user.get(f"/v1/jobs/{job_id}").json())["state"]
                    in ("succeeded", "failed", "cancelled", "lost")
                    and j
                ),
                f"the gang to end ({seen()})",
                180,
            )
            served, reached = (
                user.get(f"/v1/jobs/{job_id}/logs", params={"replica": r}).text for r in (0, 1)
            )
            assert job["state"] == "succeeded", (job["reason"], served, reached, seen())
            assert "served" in served, served
            master = next(
                a for a in namespaces.addresses if f"reached {a}:" in reached
            )  # the master node's own address, from the other namespace
            assert master, reached
            events = [e["reason"] for e in job["events"]]
            assert any("on ns0" in e and "ns1" in e for e in events), events
        finally:
            user.close()
            for proc in agents:
                stop_process(proc)
