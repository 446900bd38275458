"""The agent loop against a recording transport: register on change, heartbeat, act, flag."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest
from agent_work import HOLD, device, settings, stand_ins, started, work

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.inventory import node_in
from xpupool.model.errors import NotFound
from xpupool.probes.base import DeviceInfo
from xpupool.server.schemas.agent_protocol import Heartbeat, HeartbeatReply, NodeIn, Work


class Recorder:
    def __init__(self) -> None:
        self.registered: list[NodeIn] = []
        self.heartbeats: list[Heartbeat] = []
        self.logs: list[bytes] = []
        self.run: list[Work] = []
        self.stop: list[tuple[int, int]] = []
        self.forget = False

    def register(self, node: NodeIn) -> None:
        self.registered.append(node)

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        if self.forget:
            self.forget = False
            raise NotFound("node", body.node)
        self.heartbeats.append(body)
        reply = HeartbeatReply(run=self.run, stop=self.stop, heartbeat_s=0.1)
        self.run, self.stop = [], []
        return reply

    def append_log(
        self, node: str, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        self.logs.append(chunk)


class Cards:
    """One card; its per-process memory puts every pid of the agent's replicas over the grant."""

    vendor: ClassVar[str] = "nvidia"

    def __init__(self) -> None:
        self.count = 1
        self.pids: list[int] = []

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("nvidia", "H100", f"GPU-{i}", i, 81559) for i in range(self.count)]

    def process_memory(self) -> dict[str, dict[int, int]]:
        return {"GPU-0": dict.fromkeys(self.pids, 50000)}


def _agent(tmp_path: Path, cards: Cards, t: Recorder) -> tuple[Agent, HostedNode]:
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor([cards], dev_root=stand_ins(tmp_path / "dev", nvidia0="/dev/zero")),
        inventory=lambda devices: node_in("n1", devices),
    )
    return Agent(t, [node], heartbeat_s=0.1, poll_s=0.02), node


@pytest.mark.slow
def test_registers_once_and_again_only_on_change(tmp_path: Path) -> None:
    cards, t = Cards(), Recorder()
    agent, node = _agent(tmp_path, cards, t)
    agent.step(node)
    agent.step(node)
    assert len(t.registered) == 1 and len(t.heartbeats) == 2
    assert [d.uuid for d in t.registered[0].devices] == ["GPU-0"]
    cards.count = 2
    agent.step(node)
    assert len(t.registered) == 2 and len(t.registered[1].devices) == 2
    t.forget = True  # the server lost the node (a wiped database): register again
    agent.step(node)
    agent.step(node)
    assert len(t.registered) == 3


@pytest.mark.slow
def test_runs_reports_and_flags_memory_over_the_grant(tmp_path: Path) -> None:
    cards, t = Cards(), Recorder()
    agent, node = _agent(tmp_path, cards, t)
    grant = device(0, memory_mib=20480)
    grant.uuid = "GPU-0"
    t.run = [work([sys.executable, "-c", HOLD, "/dev/zero"], node="n1", devices=[grant])]
    agent.step(node)
    rep = started(node.runner.replicas[(7, 0)], node.runner)
    assert rep.pid is not None
    cards.pids = [rep.pid]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        any(r.reason for hb in t.heartbeats for r in hb.replicas) and b"go" in b"".join(t.logs)
    ):  # flagged, and the child has printed (a stop before its first line would lose it)
        agent.tick()
        time.sleep(0.05)
    flagged = [r for hb in t.heartbeats for r in hb.replicas if r.reason]
    assert flagged and flagged[-1].state == "running"
    assert "GPU-0 50000 MiB > 20480 MiB granted" in flagged[-1].reason
    assert flagged[-1].memory_used_mib == {"GPU-0": 50000}
    t.stop = [(7, 0)]
    agent.step(node)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)
    assert [r.state for r in t.heartbeats[-1].replicas] == ["stopped"]
    assert b"go" in b"".join(t.logs)


@pytest.mark.slow
def test_a_replica_over_its_share_past_the_grace_is_stopped(tmp_path: Path) -> None:
    from xpupool.agent.share_watch import ShareWatch

    cards, t = Cards(), Recorder()
    agent, node = _agent(tmp_path, cards, t)
    assert node.monitor is not None
    node.monitor.shares = ShareWatch(tolerance=0.05, grace_s=0.2)
    grant = device(0, memory_mib=20480)
    grant.uuid = "GPU-0"
    t.run = [work([sys.executable, "-c", HOLD, "/dev/zero"], node="n1", devices=[grant])]
    agent.step(node)
    rep = started(node.runner.replicas[(7, 0)], node.runner)
    assert rep.pid is not None
    cards.pids = [rep.pid]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)
    reasons = [r.reason for hb in t.heartbeats for r in hb.replicas if r.reason]
    said = "stopped: used 48.8 GiB of its 20 GiB share on card GPU-0"
    assert any(r.startswith(said) for r in reasons), reasons
    # the card is free, and the replica ended as a failure of its own, saying why: the job fails
    # (or retries) with that reason, and the server stops its other replicas
    (last,) = t.heartbeats[-1].replicas
    assert last.state == "failed" and last.reason.startswith(said.removeprefix("stopped: ")), last


def test_taint_flags_become_the_registrations_taints() -> None:
    import click
    import pytest

    from xpupool.agent.command import _taints

    taints = _taints(("gpu=true:NoSchedule", "spot:PreferNoSchedule"))
    body = node_in("n1", [], taints=taints)
    assert [t.model_dump() for t in body.taints] == [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
    ]
    for bad in (("gpu:NoExecute",), ("gpu",), ("a:NoSchedule", "a=b:NoSchedule")):
        with pytest.raises(click.BadParameter) as caught:
            _taints(bad)
        assert caught.value.param_hint == "--taint" and repr(bad[-1]) in caught.value.message
