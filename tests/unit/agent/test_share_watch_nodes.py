"""The device-node proof of the share watch (agent/card_holders.py): a vendor tool's process row
is charged to a card only when that process holds the card's device node open. Real processes, a
recorded-format ``npu-smi info`` whose process name forges a row (a tool prints names raw), and
stand-in device nodes (symlinks in a device root to /dev/full, /dev/null and /dev/zero: the watch compares
``st_rdev``, which a symlink's target gives)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from agent_work import device, settings, stand_ins, started, work
from test_agent import Recorder

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.card_holders import (
    Budget,
    card_nodes,
    held_nodes,
    per_card_names,
    render_node_by_bus,
)
from xpupool.agent.inventory import node_in
from xpupool.agent.share_watch import ShareWatch
from xpupool.probes import npu_smi
from xpupool.probes.base import DeviceInfo, ProbeError, ProbeFailure
from xpupool.probes.npu_smi import NpuSmiProbe

SUMMARY = Path(__file__).parents[2] / "fixtures" / "probes" / "npu-smi" / "910b-five-digit-used.txt"
CARD0, CARD1 = "ascend-0000:C1:00.0", "ascend-0000:C2:00.0"
ROW0 = "| 0       0                 | 2210417       | python3                  |"
ROW1 = "| 1       0                 | 2210418       | python3                  |"


def forged(victim: int) -> str:
    """``npu-smi info`` where the process on NPU 0 named itself so that its row ends early and a
    second row charges its memory (57934 MiB) to ``victim`` on NPU 0; NPU 1's row is dropped."""
    name = f"x | 1 |\n| 0       0                 | {victim}       | python3"
    text = SUMMARY.read_text().replace(
        ROW0, f"| 0       0                 | 2210417       | {name} |"
    )
    return text.replace(ROW1 + " 5498                    |\n", "")


class NpuSmi:
    """``npu-smi info`` as ``text`` holds it; detail queries fail as on a board without them."""

    def __init__(self) -> None:
        self.text = SUMMARY.read_text()

    def __call__(self, vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        if list(argv) != ["npu-smi", "info"]:
            raise ProbeError(vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "not supported")
        return self.text


@pytest.mark.slow
def test_a_forged_row_naming_another_cards_replica_does_not_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica on NPU 1 that a forged row charges with 56 GiB on NPU 0 (a card it was not
    granted): it holds no NPU 0 node, so the row is ignored and the replica runs on."""
    tool = NpuSmi()
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    t = Recorder()
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor([NpuSmiProbe()], shares=ShareWatch(tolerance=0.05, grace_s=0.0)),
        inventory=lambda devices: node_in("n1", devices),
    )
    agent = Agent(t, [node], heartbeat_s=0.1, poll_s=0.02)
    grant = device(0, memory_mib=20480)
    grant.uuid, grant.index = CARD1, 1
    t.run = [work([sys.executable, "-c", "import time; time.sleep(30)"], devices=[grant])]
    agent.step(node)
    rep = started(node.runner.replicas[(7, 0)], node.runner)
    assert rep.pid is not None
    tool.text = forged(rep.pid)
    for _ in range(5):
        agent.step(node)
    assert (7, 0) in node.runner.replicas and not node.runner.replicas[(7, 0)].stop_requested
    said = [r.reason for hb in t.heartbeats for r in hb.replicas if r.reason]
    assert not said, said
    node.runner.stop(7, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (7, 0) in node.runner.replicas:
        agent.tick()
        time.sleep(0.05)


def test_each_vendor_proves_a_card_by_its_own_node_not_a_shared_one() -> None:
    assert per_card_names("nvidia", 1) == ("nvidia1",)  # not nvidiactl, nvidia-uvm
    assert per_card_names("amd", 2) == ("dri/renderD130",)  # not kfd
    assert per_card_names("hygon", 0) == ("dri/renderD128",)  # not kfd, mkfd
    assert per_card_names("huawei", 3) == ("davinci3",)  # not davinci_manager, devmm_svm
    assert per_card_names("cambricon", 0) == ("cambricon_dev0", "cambricon_ipcm0")
    assert per_card_names("mthreads", 1) == ("mtgpu.1", "dri/renderD129")
    assert per_card_names("intel", 0) == ("dri/renderD128",)
    assert per_card_names("kunlunxin", 0) == ("xpu0",)
    assert per_card_names("fake", 0) is None


def test_a_render_node_is_found_by_the_cards_bus_id(tmp_path: Path) -> None:
    """sysfs as the kernel lays it out: ``renderD<N>/device`` links to the card's PCI device;
    the card at bus 0000:c2:00.0 is renderD128 here, not renderD129 as its index would say."""
    drm, pci = tmp_path / "drm", tmp_path / "pci"
    for render, bus in (("renderD128", "0000:c2:00.0"), ("renderD129", "0000:c1:00.0")):
        (pci / bus).mkdir(parents=True)
        (drm / render).mkdir(parents=True)
        (drm / render / "device").symlink_to(pci / bus)
    assert render_node_by_bus("0000:C2:00.0", drm) == "dri/renderD128"
    assert render_node_by_bus("0000:c3:00.0", drm) is None
    root = stand_ins(tmp_path / "dev", dri__renderD128="/dev/null", dri__renderD129="/dev/zero")
    card = DeviceInfo("metax", "C500", "metax-0000:c2:00.0", 1, 65536)
    null, zero = os.stat("/dev/null").st_rdev, os.stat("/dev/zero").st_rdev
    assert card_nodes([card], root, drm) == {card.uuid: frozenset({null})}
    assert card_nodes([card], root, tmp_path / "none") == {card.uuid: frozenset({zero})}
    # a Hygon card's UUID carries no address; its probe read one (hy-smi --showbus): by it, the
    # card at index 0 is renderD129 (bus c1), not renderD128 as the index rule would say
    dcu = DeviceInfo("hygon", "K100_AI", "0x2c5a8d13e0f4b671", 0, 65520)
    assert card_nodes([dcu], root, drm, bus_ids={dcu.uuid: "0000:c1:00.0"}) == {
        dcu.uuid: frozenset({zero})
    }
    assert card_nodes([dcu], root, drm) == {dcu.uuid: frozenset({null})}  # index rule
    gone = DeviceInfo("huawei", "910B", "ascend-x", 5, 65536)  # no davinci5 under the root
    odd = DeviceInfo("fake", "X", "fake-0", 0, 1)
    assert card_nodes([gone, odd], root, drm) == {gone.uuid: frozenset(), odd.uuid: None}


def test_an_nvidia_cards_node_is_named_by_the_drivers_minor_not_its_index(tmp_path: Path) -> None:
    """The driver's procfs as nv-procfs.c writes it: NVML's card 0 here is /dev/nvidia5."""
    info = tmp_path / "gpus" / "0000:62:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-aa\nBus Location: \t 0000:62:00.0\n"
        "Device Minor: \t 5\nGPU Excluded: \t No\n"
    )
    root = stand_ins(tmp_path / "dev", nvidia0="/dev/null", nvidia5="/dev/full")
    card, other = (DeviceInfo("nvidia", "H100", u, 0, 81559) for u in ("GPU-aa", "GPU-bb"))
    full, null = os.stat("/dev/full").st_rdev, os.stat("/dev/null").st_rdev
    found = card_nodes([card, other], root, tmp_path / "drm", tmp_path / "gpus")
    assert found == {"GPU-aa": frozenset({full}), "GPU-bb": frozenset({null})}  # bb: no entry


def test_a_process_holds_the_nodes_it_has_open(holder: subprocess.Popen[str]) -> None:
    held = held_nodes(holder.pid)
    assert held is not None and os.stat("/dev/full").st_rdev in held
    assert os.stat("/dev/zero").st_rdev not in held
    assert held_nodes(2**22 + 1) is None  # no such process
    assert held_nodes(holder.pid, most=2) is None  # too many to check (stdin, out, err, full)
    budget = Budget(left=6)  # one pass's: the first look spends 4 (stdin, out, err, full)
    assert held_nodes(holder.pid, budget=budget) is not None
    assert held_nodes(holder.pid, budget=budget) is None  # 2 left: not enough for a second


def test_rows_are_charged_only_to_holders_and_the_rest_logged_once_a_minute(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    holder: subprocess.Popen[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``holder`` holds NPU 0's stand-in node (/dev/full); the forged row names this test's own process,
    which holds none: dropped, and said once over two passes."""
    tool = NpuSmi()
    tool.text = forged(os.getpid()).replace("2210417", str(holder.pid))
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    root = stand_ins(tmp_path / "dev", davinci0="/dev/full")
    monitor = Monitor([NpuSmiProbe()], dev_root=root)
    with caplog.at_level(logging.WARNING, logger="xpupool.agent"):
        first, second = monitor.read(), monitor.read()
    assert first.process_memory == {CARD0: {holder.pid: 1}, CARD1: {}}
    assert second.process_memory == first.process_memory
    said = [r.message for r in caplog.records if f"process {os.getpid()}" in r.message]
    assert len(said) == 1 and "does not hold the card's device node open" in said[0]


def test_a_cut_row_leaves_the_rows_that_can_be_read_measured(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    holder: subprocess.Popen[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process on NPU 1 names itself with a newline, cutting its row: before, the whole table
    was dropped, so a job could switch the watch off for every replica, pass after pass. Now the
    cut row alone is dropped (and said), and NPU 0's row still counts."""
    tool = NpuSmi()
    tool.text = (
        SUMMARY.read_text()
        .replace("2210417", str(holder.pid))
        .replace(ROW1, "| 1       0                 | 2210418       | py\nthon3  |")
    )
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    monitor = Monitor([NpuSmiProbe()], dev_root=stand_ins(tmp_path / "dev", davinci0="/dev/full"))
    with caplog.at_level(logging.WARNING, logger="xpupool.agent"):
        reading = monitor.read()
    assert reading.process_memory == {CARD0: {holder.pid: 57934}, CARD1: {}}
    said = [r.message for r in caplog.records if "process row" in r.message]
    assert said and "cut off" in said[0], said


def test_a_forged_row_naming_a_co_tenant_on_the_same_card_charges_no_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    holder: subprocess.Popen[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``holder`` really uses NPU 0 (its own row: 100 MiB); another process's name forges a
    second row for it with 57934 MiB. The node check passes (it holds the card), but a process
    listed twice on one card is a forgery's mark: neither row is charged, and it is said."""
    tool = NpuSmi()
    own = f"| 0       0                 | {holder.pid}       | python3                  | 100 |\n"
    text = forged(holder.pid)
    at = text.index("| 0       0                 | 2210417")
    tool.text = text[:at] + own + text[at:]
    monkeypatch.setattr(npu_smi, "run_tool", tool)
    monkeypatch.setattr(npu_smi, "tool_present", lambda name: True)
    monitor = Monitor([NpuSmiProbe()], dev_root=stand_ins(tmp_path / "dev", davinci0="/dev/full"))
    with caplog.at_level(logging.WARNING, logger="xpupool.agent"):
        reading = monitor.read()
    assert reading.process_memory is not None
    assert holder.pid not in reading.process_memory[CARD0], reading.process_memory
    said = [r.message for r in caplog.records if "listed twice" in r.message]
    assert said and str(holder.pid) in said[0], [r.message for r in caplog.records]


class Unlisted:
    """A text tool's probe whose process rows name a card its devices do not include."""

    vendor = "nvidia"
    prints_names = True

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("nvidia", "H100", "GPU-0", 0, 81559)]

    def process_memory(self) -> dict[str, dict[int, int]]:
        return {"GPU-0": {}, "GPU-9": {self.pid: 4096}}


def test_rows_of_a_card_the_probes_did_not_list_are_ignored(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    root = stand_ins(tmp_path / "dev", nvidia0="/dev/full", nvidia9="/dev/full")
    reading = Monitor([Unlisted(holder.pid)], dev_root=root, nvidia_gpus=tmp_path / "no").read()
    assert reading.process_memory == {"GPU-0": {}}
