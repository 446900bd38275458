"""Readings, absent metrics and per-replica device memory, with probes that need no hardware."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import ClassVar

import pytest
from agent_work import device, work

from xpupool.agent.monitor import Monitor, device_metrics, over_limit
from xpupool.probes import FakeProbe
from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure

FAKE = Path(__file__).parents[2] / "fixtures" / "agent" / "fake-a100x2.yaml"


class NvmlLike:
    """An NVML-shaped probe: two GPUs and per-process device memory."""

    vendor: ClassVar[str] = "nvidia"

    def __init__(self, usage: dict[str, dict[int, int]]) -> None:
        self.usage = usage
        self.skipped = ["GPU-1 power: not supported"]

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        return [
            DeviceInfo("nvidia", "H100", f"GPU-{i}", i, 81559, memory_used_mib=100 * i)
            for i in range(2)
        ]

    def process_memory(self) -> dict[str, dict[int, int]]:
        return self.usage


class Broken:
    vendor: ClassVar[str] = "huawei"

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        raise ProbeError("huawei", "npu-smi info", ProbeFailure.TIMEOUT, "no answer in 10 s")


def test_metrics_keep_unknown_as_none() -> None:
    m = device_metrics(DeviceInfo("nvidia", "H100", "u", 0, 1000, power_watts=None))
    assert m.power_w is None and m.healthy is None
    m = device_metrics(DeviceInfo("nvidia", "H100", "u", 0, 1000, health=Health.UNHEALTHY))
    assert m.healthy is False


def test_fake_probe_reading() -> None:
    reading = Monitor([FakeProbe(FAKE)]).read()
    assert [d.uuid for d in reading.devices] == ["GPU-fake-a100-0", "GPU-fake-a100-1"]
    assert reading.process_memory is None  # the fake probe cannot tell


def test_a_failing_probe_is_logged_once_and_others_still_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = Monitor([Broken(), NvmlLike({})])
    with caplog.at_level(logging.DEBUG, logger="xpupool.agent"):
        first = monitor.read()
        monitor.read()
    assert len(first.devices) == 2
    assert len(first.failures) == 1
    assert sum("npu-smi" in r.message for r in caplog.records) == 1
    unread = [r for r in caplog.records if "power_w cannot be read" in r.message]
    assert unread and all(r.levelno == logging.DEBUG for r in unread)  # -v; one INFO summary
    summary = [r for r in caplog.records if "not reported by the vendor tools" in r.message]
    assert len(summary) == 1 and summary[0].levelno == logging.INFO


def test_replica_usage_by_process_group_and_over_limit() -> None:
    usage = {"GPU-0": {101: 30000, 102: 500, 999: 7}, "GPU-1": {103: 10}}
    groups = {101: 100, 102: 100, 103: 100, 999: 900}  # pid -> pgid
    monitor = Monitor([NvmlLike(usage)], pgid_of=lambda pid: groups[pid])
    reading = monitor.read()  # a library's rows (no names printed) are charged as reported
    assert reading.process_memory == usage
    per_replica = monitor.replica_usage({(7, 0): 100}, usage)
    assert per_replica == {(7, 0): {"GPU-0": 30500, "GPU-1": 10}}
    w = work(["x"], devices=[device(0, memory_mib=20480)])
    w.assignment.devices[0].uuid = "GPU-0"
    flag = over_limit(w, per_replica[(7, 0)])
    assert "GPU-0 30500 MiB > 20480 MiB granted" in flag
    assert "GPU-1 10 MiB on a device not granted" in flag
    assert over_limit(w, {"GPU-0": 20480}) == ""


def test_vanished_processes_are_skipped() -> None:
    def gone(pid: int) -> int:
        raise ProcessLookupError(pid)

    monitor = Monitor([], pgid_of=gone)
    assert monitor.replica_usage({(1, 0): 5}, {"GPU-0": {5: 10}}) == {(1, 0): {}}


def test_a_cause_the_operator_keeps_as_a_warning_leaves_the_card_healthy() -> None:
    from xpupool.agent.monitor import device_metrics
    from xpupool.probes.base import DeviceInfo, Health

    sick = DeviceInfo(
        "nvidia", "H100", "GPU-1", 0, 81920, health=Health.UNHEALTHY, health_detail="xid-94: x"
    )
    m = device_metrics(sick)
    assert m.healthy is False and m.health_cause == "xid-94: x"
    kept = device_metrics(sick, frozenset({"94"}))
    assert kept.healthy is True and kept.health_cause == "xid-94: x"
    fine = device_metrics(DeviceInfo("nvidia", "H100", "GPU-2", 1, 81920, health=Health.HEALTHY))
    assert fine.healthy is True and fine.health_cause is None
