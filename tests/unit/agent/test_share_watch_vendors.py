"""Watch and stop beyond NVIDIA: on an Ascend card the agent reads per-process memory from
``npu-smi info``'s process table (a recorded-format fixture whose PID is the replica's) and stops
a replica over its share as it does on NVIDIA (test_agent.py); the tools are replaced at the
probes' ``run_tool`` seam. The replica's process holds a stand-in of NPU 0's node open (the device
root's ``davinci0`` is a link to /dev/zero: agent/card_holders.py). And the monitor asks a probe
that serves several vendors (xpu-smi: Kunlunxin and Intel) for per-process memory when any of
them has cards."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_work import HOLD, device, settings, stand_ins, started, work
from test_agent import Recorder

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.inventory import node_in
from xpupool.agent.share_watch import ShareWatch
from xpupool.probes import npu_smi, xpu_smi
from xpupool.probes.base import ProbeError, ProbeFailure
from xpupool.probes.npu_smi import NpuSmiProbe

SUMMARY = Path(__file__).parents[2] / "fixtures" / "probes" / "npu-smi" / "910b-five-digit-used.txt"
CARD = "ascend-0000:C1:00.0"  # NPU 0 of the fixture (no board serial: named by its bus id)


class NpuSmi:
    """``npu-smi info`` with NPU 0's process (57934 MiB) given ``pid``; detail queries fail as
    on a board that does not support them."""

    def __init__(self) -> None:
        self.pid = 0

    def __call__(self, vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        if list(argv) != ["npu-smi", "info"]:
            raise ProbeError(vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "not supported")
        return SUMMARY.read_text().replace("2210417", str(self.pid or 2210417))


@pytest.mark.slow
def test_a_replica_over_its_share_on_an_ascend_card_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = NpuSmi()
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    t = Recorder()
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor(
            [NpuSmiProbe()],
            shares=ShareWatch(tolerance=0.05, grace_s=0.2),
            dev_root=stand_ins(tmp_path / "dev", davinci0="/dev/zero"),
        ),
        inventory=lambda devices: node_in("n1", devices),
    )
    agent = Agent(t, [node], heartbeat_s=0.1, poll_s=0.02)
    grant = device(0, memory_mib=20480)
    grant.uuid = CARD
    t.run = [work([sys.executable, "-c", HOLD, "/dev/zero"], node="n1", devices=[grant])]
    agent.step(node)
    assert [d.uuid for d in t.registered[0].devices] == [CARD, "ascend-0000:C2:00.0"]
    rep = started(node.runner.replicas[(7, 0)], node.runner)
    assert rep.pid is not None
    tool.pid = rep.pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)
    said = f"used 56.6 GiB of its 20 GiB share on card {CARD}"
    (last,) = t.heartbeats[-1].replicas
    assert last.state == "failed" and last.reason.startswith(said), last


@pytest.mark.slow
def test_a_replica_within_its_share_on_an_ascend_card_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = NpuSmi()
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    t = Recorder()
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor(
            [NpuSmiProbe()],
            shares=ShareWatch(tolerance=0.05, grace_s=0.0),
            dev_root=stand_ins(tmp_path / "dev", davinci0="/dev/zero"),
        ),
        inventory=lambda devices: node_in("n1", devices),
    )
    agent = Agent(t, [node], heartbeat_s=0.1, poll_s=0.02)
    grant = device(0, memory_mib=61440)  # 60 GiB: the fixture's 57934 MiB fits
    grant.uuid = CARD
    t.run = [work([sys.executable, "-c", HOLD, "/dev/zero"], node="n1", devices=[grant])]
    agent.step(node)
    rep = started(node.runner.replicas[(7, 0)], node.runner)
    tool.pid = rep.pid or 0
    deadline = time.monotonic() + 10  # until the job has opened its node
    while time.monotonic() < deadline and not node.runner.replicas[(7, 0)].memory_used_mib:
        agent.step(node)
        time.sleep(0.05)
    for _ in range(3):
        agent.step(node)
    measured = [r for hb in t.heartbeats for r in hb.replicas if r.memory_used_mib]
    assert measured and measured[-1].memory_used_mib == {CARD: 57934}
    assert (7, 0) in node.runner.replicas and not measured[-1].reason
    node.runner.stop(7, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)


def test_a_cut_process_row_is_left_out_and_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A cut process row: the devices are still read, and per-process memory too, without
    that row (no card is charged for it); the reason is logged once, not every pass."""
    cut = SUMMARY.with_name("procs-truncated.txt").read_text()

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        if list(argv) != ["npu-smi", "info"]:
            raise ProbeError(vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "not supported")
        return cut

    monkeypatch.setattr(npu_smi, "run_tool", run)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    monitor = Monitor([NpuSmiProbe()])
    with caplog.at_level(logging.INFO, logger="xpupool.agent"):
        first, second = monitor.read(), monitor.read()
    assert [d.uuid for d in first.devices] == [CARD, "ascend-0000:C2:00.0"]
    assert first.process_memory == second.process_memory == {CARD: {}, "ascend-0000:C2:00.0": {}}
    said = [r.message for r in caplog.records if "process row" in r.message]
    assert len(said) == 1 and "process row cut off" in said[0]


def test_the_monitor_reads_intel_processes_through_the_two_vendor_xpu_smi_probe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    """Process 48211 of the recorded table is ``holder`` (it holds card 0's stand-in render
    node, /dev/full); 48502 holds none, so its row is dropped."""
    fixtures = SUMMARY.parents[1] / "xpu-smi"
    answers = {
        ("xpu-smi",): (fixtures / "intel_help.txt").read_text(),
        xpu_smi.INTEL_ARGV: (fixtures / "intel_max1550_4x.txt").read_text(),
        xpu_smi.INTEL_HEALTH_ARGV: (fixtures / "intel_health_ok.txt").read_text(),
        xpu_smi.INTEL_PS_ARGV: (fixtures / "intel_ps.txt")
        .read_text()
        .replace("48211", str(holder.pid)),
    }
    monkeypatch.setattr(
        xpu_smi, "run_tool", lambda vendor, argv, timeout_s=10.0: answers[tuple(argv)]
    )
    monkeypatch.setattr(xpu_smi, "tool_present", lambda name: True)
    root = stand_ins(tmp_path / "dev", dri__renderD128="/dev/full")
    reading = Monitor([xpu_smi.XpuSmiProbe()], dev_root=root).read()
    assert {d.vendor for d in reading.devices} == {"intel"}  # the probe's vendor is kunlunxin
    assert reading.process_memory is not None
    first = reading.devices[0].uuid
    assert reading.process_memory[first] == {holder.pid: 40000}


class Ixml:
    """libixml's per-process calls for two cards (probes/nvml_shaped.py), listing ``rows``."""

    def __init__(self, rows: list[list[tuple[int, int]]]) -> None:
        self.rows = rows

    def nvmlInit_v2(self) -> int:  # noqa: N802 (libixml's C names)
        return 0

    def nvmlShutdown(self) -> int:  # noqa: N802 (libixml's C names)
        return 0

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:  # noqa: N802 (libixml's C names)
        count.contents.value = len(self.rows)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, handle: Any) -> int:  # noqa: N802 (libixml's C names)
        handle.contents.value = index.value + 1
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any, count: Any, infos: Any) -> int:  # noqa: N802 (libixml's C names)
        rows = self.rows[handle.value - 1]
        if infos is None:
            count.contents.value = len(rows)
            return 7 if rows else 0
        for i, (pid, used) in enumerate(rows):
            infos[i].pid, infos[i].used = pid, used
        count.contents.value = len(rows)
        return 0


def test_iluvatar_rows_from_the_library_still_need_the_cards_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: subprocess.Popen[str]
) -> None:
    """libixml's rows: ``holder`` holds card 0's stand-in node (/dev/full) and is charged; this
    test's own process holds none, so its row is dropped (the library's index and the card's
    node are unverified on hardware: a row on the wrong card must not count)."""
    from xpupool.probes import ixsmi
    from xpupool.probes.ixsmi import IxsmiProbe
    from xpupool.probes.nvml_shaped import IXML, CompatProcesses

    text = (SUMMARY.parents[1] / "ixsmi" / "bi_v150_4x.txt").read_text()
    monkeypatch.setattr(ixsmi, "run_tool", lambda vendor, argv, timeout_s=10.0: text)
    monkeypatch.setattr(ixsmi, "tool_present", lambda name: True)
    gib = 1024**3
    lib = Ixml([[(holder.pid, 3 * gib), (os.getpid(), 5 * gib)], [], [], []])
    probe = IxsmiProbe(CompatProcesses(IXML, lib))
    root = stand_ins(tmp_path / "dev", iluvatar0="/dev/full")
    reading = Monitor([probe], dev_root=root).read()
    assert reading.process_memory is not None
    first = probe.uuids[0]
    assert reading.process_memory[first] == {holder.pid: 3072}
