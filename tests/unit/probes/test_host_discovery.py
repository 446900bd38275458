"""Host discovery over several probes: absent tools are skipped, failures collected, never raised."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from xpupool.probes import DeviceInfo, ProbeError, ProbeFailure
from xpupool.probes.fake import FakeProbe
from xpupool.probes.host import discover_host


class Broken:
    vendor: ClassVar[str] = "huawei"

    def available(self) -> bool:
        return True

    def discover(self) -> list[DeviceInfo]:
        raise ProbeError(self.vendor, "npu-smi info", ProbeFailure.PARSE, "no NPU table")


def test_collects_devices_skips_absent_and_keeps_failures(tmp_path: Path) -> None:
    devices = tmp_path / "d.yaml"
    devices.write_text("devices:\n  - {vendor: nvidia, model: Tesla T4, memory: 15Gi, count: 2}\n")
    again = tmp_path / "again.yaml"  # the same cards seen twice keep one report
    again.write_text(devices.read_text())
    result = discover_host(
        [FakeProbe(devices), FakeProbe(tmp_path / "absent.yaml"), Broken(), FakeProbe(again)]
    )
    assert [d.uuid for d in result.devices] == ["nvidia-Tesla-T4-0", "nvidia-Tesla-T4-1"]
    assert result.skipped == ["fake"]
    assert [f.kind for f in result.failures] == [ProbeFailure.PARSE]
