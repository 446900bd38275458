"""mx-smi default table: four MetaX C500, N/A as None, GPU-State as health."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import Health, ProbeError, ProbeFailure, mx_smi
from xpupool.probes.mx_smi import MxSmiProbe, parse_mx_smi

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "probes" / "mx-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_four_c500_with_exact_fields() -> None:
    devices = parse_mx_smi(fixture("c500_4x.txt"))
    assert [d.index for d in devices] == [0, 1, 2, 3]
    first = devices[0]
    assert first.vendor == "metax"
    assert first.model == "MetaX C500"
    assert first.canonical_model == "C500"
    assert first.uuid == "metax-0000:0f:00.0"
    assert (first.memory_total_mib, first.memory_used_mib) == (65536, 58112)
    assert (first.utilization_pct, first.power_watts, first.temperature_c) == (78.0, 287.0, 61.0)
    assert first.driver_version == "2.12.13"
    assert first.runtimes == {"maca": "2.33.0.13"}
    assert first.health is Health.HEALTHY and first.health_detail == ""


def test_na_is_none_and_abnormal_state_is_unhealthy() -> None:
    last = parse_mx_smi(fixture("c500_4x.txt"))[3]
    assert last.utilization_pct is None and last.power_watts is None
    assert last.temperature_c is None
    assert last.memory_used_mib == 858
    assert last.health is Health.UNHEALTHY and last.health_detail == "Abnormal"


def test_header_without_gpus_is_empty() -> None:
    assert parse_mx_smi(fixture("no_gpus.txt")) == []


def test_truncated_second_line_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as info:
        parse_mx_smi(fixture("truncated.txt"))
    assert info.value.kind is ProbeFailure.PARSE and "GPU 0" in info.value.detail


@pytest.mark.parametrize("text", ["", "mx-smi: command not found\n", "MOFFETT-SMI 2.3.0\n"])
def test_missing_header_is_a_parse_error(text: str) -> None:
    with pytest.raises(ProbeError) as info:
        parse_mx_smi(text)
    assert info.value.kind is ProbeFailure.PARSE and "MX-SMI" in info.value.detail


def test_discover_parses_the_tool_output(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        assert tuple(argv) == ("mx-smi",)
        return fixture("c500_4x.txt")

    monkeypatch.setattr(mx_smi, "run_tool", run)
    assert [d.index for d in MxSmiProbe().discover()] == [0, 1, 2, 3]


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert MxSmiProbe().available() is False
    with pytest.raises(ProbeError) as info:
        MxSmiProbe().discover()
    assert info.value.kind is ProbeFailure.TOOL_MISSING
