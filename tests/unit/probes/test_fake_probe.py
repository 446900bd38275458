"""The fake probe: devices from YAML, validated with field paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.model import RequestError
from xpupool.probes import Health, ProbeError, ProbeFailure
from xpupool.probes.fake import FakeProbe, parse_fake


def test_yaml_devices_expand_with_groups_and_catalog_names(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(
        "devices:\n"
        "  - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi,\n"
        "     driver: 550.54.15, runtimes: {cuda: '12.4'}, link_group_size: 2, uuid_prefix: GPU-a}\n"
        "  - {vendor: ascend, model: 910B3, memory: 64Gi, healthy: false}\n"
    )
    devices = FakeProbe(path).discover()
    assert [d.uuid for d in devices[:4]] == ["GPU-a-0", "GPU-a-1", "GPU-a-2", "GPU-a-3"]
    assert devices[0].canonical_model == "A100-SXM4-80GB"
    assert devices[0].memory_total_mib == 81920 and devices[0].runtimes == {"cuda": "12.4"}
    assert devices[0].link_group == devices[1].link_group != devices[2].link_group
    npu = devices[4]
    assert (npu.vendor, npu.index, npu.health) == ("huawei", 4, Health.UNHEALTHY)
    assert npu.to_device().healthy is False


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"vendor": "nvidai", "model": "x", "memory": "1Gi"}, "devices[0].vendor"),
        ({"vendor": "nvidia", "memory": "1Gi"}, "devices[0].model"),
        ({"vendor": "nvidia", "model": "x", "memory": "1Gx"}, "devices[0].memory"),
        ({"vendor": "nvidia", "model": "x", "memory": "1Gi", "count": 0}, "devices[0].count"),
        ({"vendor": "nvidia", "model": "x", "memory": "1Gi", "colour": 1}, "devices[0].colour"),
    ],
)
def test_bad_entries_name_the_field(entry: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as exc:
        parse_fake({"devices": [entry]})
    assert exc.value.field == field


def test_missing_or_broken_file_is_a_probe_error(tmp_path: Path) -> None:
    assert FakeProbe(tmp_path / "none.yaml").available() is False
    with pytest.raises(ProbeError) as exc:
        FakeProbe(tmp_path / "none.yaml").discover()
    assert exc.value.kind is ProbeFailure.TOOL_MISSING
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: [\n")
    with pytest.raises(ProbeError) as exc:
        FakeProbe(broken).discover()
    assert exc.value.kind is ProbeFailure.PARSE


def test_a_bad_entry_in_the_file_is_a_probe_error_naming_the_field(tmp_path: Path) -> None:
    """A probe reports and never brings the agent down (its ``Monitor`` only catches
    ProbeError): an entry the format refuses leaves that file's devices out, saying why."""
    path = tmp_path / "devices.yaml"
    path.write_text("devices:\n  - {vendor: nvidia, model: x, memory: 1Gi, count: 0}\n")
    with pytest.raises(ProbeError) as exc:
        FakeProbe(path).discover()
    assert exc.value.kind is ProbeFailure.PARSE
    assert exc.value.detail.startswith("devices[0].count")
