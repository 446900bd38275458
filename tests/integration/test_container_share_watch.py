"""Image replicas under the share watch, on a real podman (issue 46): a container's processes are
in the engine's cgroup (``libpod-<id>``), not under the replica's supervisor, so the agent maps a
card's process to its replica by the container id in ``/proc/PID/cgroup`` (the runtime writes
it to the replica's ``--cidfile``) and applies the same stop rule as to a process job.

The card is an Ascend NPU 0 made of stand-ins: the device root's ``davinci0`` links to
/dev/full (the control nodes to /dev/null), the container gets it as ``/dev/davinci0`` the
vendor's way and its job holds it open, so the device-node check (agent/card_holders.py) proves
the process uses the card. The vendor tool is the one fake: its per-process rows charge the host
PID of each container's ``sleep`` (read with ``podman top``) with 50000 MiB.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from container_images import busybox_image, podman, require_podman
from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.inventory import node_in
from xpupool.agent.launch import LaunchSettings
from xpupool.agent.launch.cgroups import DEFAULT_PIDS_MAX
from xpupool.agent.launch.container import OWNER_LABEL
from xpupool.agent.launch.runtime_config import detect_runtime_config
from xpupool.agent.share_watch import ShareWatch
from xpupool.probes.base import DeviceInfo
from xpupool.probes.container_runtime import ask_runtime
from xpupool.server.schemas.agent_protocol import (
    DeviceAssignment,
    Heartbeat,
    HeartbeatReply,
    NodeIn,
    ReplicaAssignment,
    Work,
)

__all__ = ["busybox_image"]  # a fixture, used by name

CARD = "ascend-0"
HOLD = ["sh", "-c", "exec 3</dev/davinci0; echo go; exec sleep 60"]


class Npu:
    """NPU 0, and a vendor tool whose rows charge ``pids`` with 50000 MiB each."""

    vendor: ClassVar[str] = "huawei"
    prints_names: ClassVar[bool] = True  # npu-smi's rows: the device-node check applies

    def __init__(self) -> None:
        self.pids: list[int] = []

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("huawei", "910B3", CARD, 0, 65536)]

    def process_memory(self) -> dict[str, dict[int, int]]:
        return {CARD: dict.fromkeys(self.pids, 50000)}


class Server:
    """The agent's transport, answering as the server would: runs what ``run`` holds, once."""

    def __init__(self) -> None:
        self.run: list[Work] = []
        self.heartbeats: list[Heartbeat] = []

    def register(self, node: NodeIn) -> None:
        pass

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        self.heartbeats.append(body)
        reply = HeartbeatReply(run=self.run, stop=[], heartbeat_s=0.1)
        self.run = []
        return reply

    def append_log(self, *args: object) -> None:
        pass


def image_work(job_id: int, share_mib: int, image: str) -> Work:
    grant = DeviceAssignment(
        uuid=CARD,
        vendor="huawei",
        index=0,
        model="910B3",
        memory_mib=share_mib,
        core_permille=500,
        card_memory_mib=65536,
    )
    return Work(
        job_id=job_id,
        replica=0,
        name=f"j{job_id}",
        command=HOLD,
        image=image,
        env={},
        tenant="t1",
        tenant_index=0,
        assignment=ReplicaAssignment(
            replica=0,
            allocation_id=job_id,
            node="n1",
            cpu_milli=100,
            memory_mib=64,
            devices=[grant],
        ),
    )


def stand_ins(root: Path) -> Path:
    for name, target in (
        ("davinci0", "/dev/full"),
        ("davinci_manager", "/dev/null"),
        ("devmm_svm", "/dev/null"),
        ("hisi_hdc", "/dev/null"),
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(target)
    return root


def sleep_pid(name: str) -> int | None:
    """The host PID of the container's ``sleep`` (its job, once the node is open), or None."""
    done = podman("top", name, "hpid", "args")
    for line in done.stdout.splitlines()[1:]:
        hpid, _, args = line.strip().partition(" ")
        if args.strip().startswith("sleep"):
            return int(hpid)
    return None


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, HostedNode, Npu, Server]]:
    require_podman()
    root = stand_ins(tmp_path / "dev")
    config = detect_runtime_config(ask_runtime("podman"), DEFAULT_PIDS_MAX)
    settings = LaunchSettings(  # the host network: no published port to collide with others'
        job_root=tmp_path / "jobs",
        runtime="podman",
        device_root=root,
        runtime_config=config,
        network="host",
    )
    npu, server = Npu(), Server()
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path / "agent", grace_s=1.0, settings=settings),
        monitor=Monitor([npu], shares=ShareWatch(tolerance=0.05, grace_s=0.0), dev_root=root),
        inventory=lambda devices: node_in("n1", devices),
    )
    yield Agent(server, [node], heartbeat_s=0.1, poll_s=0.02), node, npu, server
    node.runner.shutdown(timeout_s=20)


def test_a_container_replica_over_its_share_is_stopped_and_one_within_runs_on(
    agent: tuple[Agent, HostedNode, Npu, Server], busybox_image: str, tmp_path: Path
) -> None:
    """Two image replicas on NPU 0 whose processes the tool charges with 50000 MiB each: job 7,
    granted 20 GiB, is stopped with the reason; job 8, granted 60 GiB, runs on, measured."""
    a, node, npu, server = agent
    server.run = [image_work(7, 20480, busybox_image), image_work(8, 61440, busybox_image)]
    a.step(node)
    pids: dict[int, int] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(pids) < 2:
        for name in mine(tmp_path / "agent"):
            job = int(name.removeprefix("xpupool-n1-").split("-")[0])  # node-job-replica-...
            pid = pids.get(job) or sleep_pid(name)
            if pid is not None:
                pids[job] = pid
        a.tick()
        time.sleep(0.1)
    assert sorted(pids) == [7, 8], (pids, mine(tmp_path / "agent"))
    npu.pids = list(pids.values())
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        a.tick()
        time.sleep(0.05)
    reasons = [r.reason for hb in server.heartbeats for r in hb.replicas if r.job_id == 7]
    said = f"used 48.8 GiB of its 20 GiB share on card {CARD}"
    assert any(r and r.startswith(said) for r in reasons), reasons
    assert (8, 0) in node.runner.replicas and not node.runner.replicas[(8, 0)].stop_requested
    eight = [r for hb in server.heartbeats for r in hb.replicas if r.job_id == 8]
    assert eight[-1].state == "running" and eight[-1].memory_used_mib == {CARD: 50000}


def mine(owner: Path) -> list[str]:
    """The running containers of this test's agent (its work directory is their owner)."""
    label = f"label={OWNER_LABEL}={owner}"
    return podman("ps", "--filter", label, "--format", "{{.Names}}").stdout.split()
