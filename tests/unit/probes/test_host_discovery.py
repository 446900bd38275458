"""Host discovery over several probes: absent tools are skipped, failures collected, never raised."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from xpupool.probes import PROBES, DeviceInfo, ProbeError, ProbeFailure, host_probes
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


def test_every_registered_probe_runs_on_a_host_without_any_vendor_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """This machine has no accelerators: every probe must say so without raising."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no vendor tools
    result = discover_host(host_probes())
    assert result.devices == []
    probes = host_probes()
    said = set(result.skipped) | {f.vendor for f in result.failures}
    assert {p.vendor for p in probes} <= said  # each said absent or failed, none silent
    assert "intel" in result.skipped  # xpu-smi's second vendor too (issue 42)
    assert len(probes) == len(PROBES)


def test_an_absent_xpu_smi_names_intel_as_well_as_kunlunxin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 42 part 4: ``xpupool probe`` never named Intel among the absent tools, because the
    one ``xpu-smi`` probe serves both vendors and was skipped under Kunlunxin's name alone."""
    from xpupool.probes import xpu_smi

    monkeypatch.setattr(xpu_smi, "tool_present", lambda tool: False)
    found = discover_host([xpu_smi.XpuSmiProbe()])
    assert found.skipped == ["kunlunxin", "intel"]
