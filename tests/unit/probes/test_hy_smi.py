"""hy-smi JSON parser on both key generations, and discover() with run_tool patched at the seam."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import hy_smi
from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure
from xpupool.probes.hy_smi import ARGV, HySmiProbe, parse_hy_smi_json

FIXTURES = Path(__file__).parents[2] / "fixtures" / "probes" / "hy-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_new_hy_smi_keys_in_mib() -> None:
    devices = parse_hy_smi_json(fixture("k100-new-keys.json"))
    assert devices[0] == DeviceInfo(
        vendor="hygon",
        model="K100_AI",
        uuid="0x2c5a8d13e0f4b671",
        index=0,
        memory_total_mib=65520,
        canonical_model="K100-AI",
        memory_used_mib=512,
        utilization_pct=0.0,
        power_watts=98.0,
        temperature_c=41.0,
        driver_version="6.3.8-V1.9.2a",
        health=Health.UNKNOWN,
    )
    assert devices[1].memory_used_mib == 58312
    assert devices[1].utilization_pct == 97.0
    assert devices[1].temperature_c == 63.0  # junction preferred over edge


def test_old_rocm_smi_style_keys_in_bytes() -> None:
    devices = parse_hy_smi_json(fixture("z100-old-keys.json"))
    assert [d.model for d in devices] == ["Z100L", "Z100L"]
    assert [d.canonical_model for d in devices] == ["Z100L", "Z100L"]
    assert [d.memory_total_mib for d in devices] == [32752, 32752]
    assert [d.memory_used_mib for d in devices] == [16384, 24]
    assert [d.utilization_pct for d in devices] == [35.0, 0.0]
    assert [d.temperature_c for d in devices] == [47.0, 36.0]  # edge only on old drivers
    assert devices[0].uuid == "0x7b3e10c4a5d2f019"
    assert devices[0].driver_version == "4.0.2-dtk22.10"


@pytest.mark.parametrize("text", ["", fixture("empty.json")])
def test_no_card_is_empty(text: str) -> None:
    assert parse_hy_smi_json(text) == []


def test_cut_off_json_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_hy_smi_json(fixture("broken.txt"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert "cardN" in caught.value.detail


def test_card_without_any_memory_key_names_the_expected_keys() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_hy_smi_json(fixture("missing-memory.json"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert "vram Total Memory (MiB)" in caught.value.detail
    assert "VRAM Total Memory (B)" in caught.value.detail


def test_json_array_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_hy_smi_json("[]")
    assert caught.value.kind is ProbeFailure.PARSE


def test_discover_runs_one_json_query(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        calls.append(tuple(argv))
        return fixture("k100-new-keys.json")

    monkeypatch.setattr(hy_smi, "run_tool", run)
    devices = HySmiProbe().discover()
    assert calls == [ARGV]
    assert "--json" in ARGV
    assert [d.uuid for d in devices] == ["0x2c5a8d13e0f4b671", "0x2c5a8d13e0f4b9a2"]


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = HySmiProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as caught:
        probe.discover()
    assert caught.value.kind is ProbeFailure.TOOL_MISSING
    assert caught.value.vendor == "hygon"
