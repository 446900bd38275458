"""ixsmi CSV query: columns by header name, [N/A] as None, broken output as PARSE."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import ProbeError, ProbeFailure, ixsmi
from xpupool.probes.ixsmi import IxsmiProbe, parse_ixsmi

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "probes" / "ixsmi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_four_bi_v150_with_exact_fields() -> None:
    devices = parse_ixsmi(fixture("bi_v150_4x.txt"))
    assert [d.index for d in devices] == [0, 1, 2, 3]
    first = devices[0]
    assert first.vendor == "iluvatar"
    assert first.model == "Iluvatar BI-V150"
    assert first.canonical_model == "BI-V150"
    assert first.uuid == "GPU-3f0c9a51-6d2e-5b7a-8e41-0c2f7d19a6b3"
    assert (first.memory_total_mib, first.memory_used_mib) == (65536, 54210)
    assert (first.utilization_pct, first.temperature_c, first.power_watts) == (96.0, 58.0, 221.4)
    assert first.driver_version == "4.1.0"
    assert first.compute_units is None and first.numa_node is None


def test_not_supported_and_na_are_none() -> None:
    third, fourth = parse_ixsmi(fixture("bi_v150_4x.txt"))[2:]
    assert third.power_watts is None and third.utilization_pct == 0.0
    assert fourth.utilization_pct is None and fourth.temperature_c == 33.0


def test_no_devices_is_empty() -> None:
    assert parse_ixsmi(fixture("no_devices.txt")) == []


def test_header_only_is_empty() -> None:
    assert parse_ixsmi(fixture("bi_v150_4x.txt").splitlines()[0]) == []


@pytest.mark.parametrize("name", ["wrong_header.txt", "bad_row.txt"])
def test_broken_output_is_a_parse_error(name: str) -> None:
    with pytest.raises(ProbeError) as info:
        parse_ixsmi(fixture(name))
    assert info.value.kind is ProbeFailure.PARSE and info.value.vendor == "iluvatar"
    assert "expected" in info.value.detail


def test_empty_output_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as info:
        parse_ixsmi("")
    assert info.value.kind is ProbeFailure.PARSE


def test_discover_runs_the_query_and_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, ...]] = []

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        seen.append(tuple(argv))
        return fixture("bi_v150_4x.txt")

    monkeypatch.setattr(ixsmi, "run_tool", run)
    assert len(IxsmiProbe().discover()) == 4
    assert seen == [ixsmi.ARGV] and seen[0][-1] == "--format=csv"


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert IxsmiProbe().available() is False
    with pytest.raises(ProbeError) as info:
        IxsmiProbe().discover()
    assert info.value.kind is ProbeFailure.TOOL_MISSING
