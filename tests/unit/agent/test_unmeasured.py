"""Replicas whose processes cannot be measured (agent/unmeasured.py): a job cannot use up the
pass's descriptor budget to hide another replica's rows, and a replica whose own rows go
unchecked pass after pass is reported, and stopped when the operator asks for it. Real
replicas, a text-tool probe (``prints_names``) reporting their rows, and a stand-in device node
(``nvidia0`` links to /dev/full, which the replicas hold open)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest
from agent_work import HOLD, device, settings, stand_ins, started, work
from test_agent import Recorder

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent import monitor as monitor_module
from xpupool.agent.card_holders import Budget
from xpupool.agent.inventory import node_in
from xpupool.agent.unmeasured import UnmeasuredWatch
from xpupool.probes.base import DeviceInfo
from xpupool.server.schemas.agent_protocol import DeviceAssignment

# a replica that holds the card's node and 40 more files: its rows cost the pass 40-odd stats
HOG = (
    "import sys, time; extra = [open('/dev/null', 'rb') for _ in range(40)];"
    " f = open(sys.argv[1], 'rb'); print('go', flush=True); time.sleep(30)"
)


class Rows:
    """A text tool's probe (its rows must be proven) on one card, listing ``pids`` in order."""

    vendor: ClassVar[str] = "nvidia"
    prints_names: ClassVar[bool] = True

    def __init__(self) -> None:
        self.pids: list[int] = []

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("nvidia", "H100", "GPU-0", 0, 81559)]

    def process_memory(self) -> dict[str, dict[int, int]]:
        return {"GPU-0": {pid: 1024 * (n + 1) for n, pid in enumerate(self.pids)}}


def _node(tmp_path: Path, rows: Rows, watch: UnmeasuredWatch | None = None) -> HostedNode:
    return HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor(
            [rows],
            dev_root=stand_ins(tmp_path / "dev", nvidia0="/dev/full"),
            nvidia_gpus=tmp_path / "no-driver",
            unmeasured=watch,
        ),
        inventory=lambda devices: node_in("n1", devices),
    )


def _grant() -> DeviceAssignment:
    grant = device(0, memory_mib=20480)
    grant.uuid = "GPU-0"
    return grant


def _stop_all(agent: Agent, node: HostedNode) -> None:
    for key in list(node.runner.replicas):
        node.runner.stop(*key)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and node.runner.replicas:
        agent.tick()
        time.sleep(0.05)


@pytest.mark.slow
def test_a_replica_cannot_use_up_the_pass_budget_to_hide_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hog's rows come first and cost about 44 of a pass budget of 46: the victim's row
    used to be left unchecked, so it went unmeasured. Each replica now draws on its own budget."""
    monkeypatch.setattr(monitor_module, "Budget", lambda: Budget(left=46))
    rows, t = Rows(), Recorder()
    node = _node(tmp_path, rows)
    agent = Agent(t, [node], heartbeat_s=0.1, poll_s=0.02)
    t.run = [
        work([sys.executable, "-c", HOG, "/dev/full"], devices=[_grant()]),
        work([sys.executable, "-c", HOLD, "/dev/full"], replica=1, devices=[_grant()]),
    ]
    agent.step(node)
    hog = started(node.runner.replicas[(7, 0)], node.runner)
    victim = started(node.runner.replicas[(7, 1)], node.runner)
    assert hog.pid is not None and victim.pid is not None
    time.sleep(0.5)  # both have opened their files
    rows.pids = [hog.pid, victim.pid]
    agent.step(node)
    assert victim.memory_used_mib == {"GPU-0": 2048}, victim.memory_used_mib
    assert hog.memory_used_mib == {"GPU-0": 1024}
    _stop_all(agent, node)


@pytest.mark.slow
def test_a_replica_unmeasured_pass_after_pass_is_reported_then_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hog holds more files than its budget lets the agent check: its rows are dropped each
    pass. After two such passes the job is told why; with ``stop`` the replica is stopped."""
    monkeypatch.setattr(monitor_module, "Budget", lambda: Budget(left=20))
    rows, t = Rows(), Recorder()
    node = _node(tmp_path, rows, UnmeasuredWatch(passes=2, stop=True))
    agent = Agent(t, [node], heartbeat_s=0.1, poll_s=0.02)
    t.run = [work([sys.executable, "-c", HOG, "/dev/full"], devices=[_grant()])]
    agent.step(node)
    hog = started(node.runner.replicas[(7, 0)], node.runner)
    assert hog.pid is not None
    time.sleep(0.5)
    rows.pids = [hog.pid]
    agent.step(node)
    assert not hog.stop_requested  # one pass: not yet
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)
    reasons = [r.reason for hb in t.heartbeats for r in hb.replicas if r.reason]
    said = "stopped: its processes on card GPU-0 could not be measured for 2 passes in a row"
    assert any(r.startswith(said) for r in reasons), reasons
    (last,) = t.heartbeats[-1].replicas
    assert last.state == "failed"


def test_the_count_starts_again_after_a_measured_pass_and_ends_with_the_replica() -> None:
    watch = UnmeasuredWatch(passes=3)
    key = (7, 0)
    assert watch.check(key, {"GPU-0"}) == "" and watch.check(key, {"GPU-0"}) == ""
    assert watch.check(key, set()) == ""  # measured: from zero again
    assert watch.check(key, {"GPU-0"}) == "" and watch.check(key, {"GPU-0"}) == ""
    assert watch.check(key, {"GPU-0"}).startswith("its processes on card GPU-0")
    watch.keep([])
    assert watch.check(key, {"GPU-0"}) == ""
