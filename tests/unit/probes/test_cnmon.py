"""cnmon info parser on a docs-derived fixture, and discover() with run_tool patched at the seam."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from xpupool.probes import cnmon
from xpupool.probes.base import Health, ProbeError, ProbeFailure
from xpupool.probes.cnmon import CnmonProbe, parse_cnmon, parse_cnmon_info, parse_cnmon_processes
from xpupool.probes.health_causes import cause_key

FIXTURES = Path(__file__).parents[2] / "fixtures" / "probes" / "cnmon"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_groups_are_flattened_and_kept_apart() -> None:
    cards = parse_cnmon_info(fixture("mlu370-x8.txt"))
    assert list(cards) == [0, 1]
    assert cards[0]["Physical Memory Usage/Total"] == "49152 MiB"
    assert cards[0]["Virtual Memory Usage/Total"] == "1048576 MiB"
    assert cards[0]["PCIe Bus"] == "0000:3B:00.0"
    assert cards[1]["Utilization/MLU Average"] == "88 %"


def test_mlu370_x8_devices() -> None:
    first, second = parse_cnmon(fixture("mlu370-x8.txt"))
    assert first.vendor == "cambricon"
    assert first.model == "MLU370-X8"
    assert first.canonical_model == "MLU370-X8"
    assert first.uuid == "8C5E2B14-7A3D-4F19-96C2-0D1E3A5B7C90"
    assert first.index == 0
    assert first.memory_total_mib == 49152
    assert first.memory_used_mib == 1150
    assert first.utilization_pct == 0.0
    assert first.power_watts == 63.0
    assert first.temperature_c == 34.0
    assert first.driver_version == "v5.10.22"
    assert first.health is Health.UNKNOWN
    assert (second.index, second.memory_used_mib, second.utilization_pct) == (1, 40960, 88.0)


def test_empty_output_is_empty() -> None:
    assert parse_cnmon(fixture("empty.txt")) == []


def test_fields_before_any_card_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_cnmon(fixture("broken.txt"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert "Card N" in caught.value.detail


def test_card_without_memory_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_cnmon("Card 0\nProduct Name : MLU370-X8\n")
    assert caught.value.kind is ProbeFailure.PARSE
    assert "Physical Memory Usage/Total" in caught.value.detail


def test_discover(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        assert list(argv) == ["cnmon", "info"]
        return fixture("mlu370-x8.txt")

    monkeypatch.setattr(cnmon, "run_tool", run)
    assert [d.index for d in CnmonProbe().discover()] == [0, 1]


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = CnmonProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as caught:
        probe.discover()
    assert caught.value.kind is ProbeFailure.TOOL_MISSING


def _tool(name: str) -> Callable[[str, Sequence[str], float], str]:
    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        assert list(argv) == ["cnmon", "info"]
        return fixture(name)

    return run


def test_cnmon5_health_state_good_is_healthy() -> None:
    first, second = parse_cnmon(fixture("mlu370-x4-procs.txt"))
    assert (first.health, first.health_detail) == (Health.HEALTHY, "")
    assert second.health is Health.HEALTHY
    assert (first.memory_used_mib, first.utilization_pct) == (17860, 71.0)


def test_a_device_health_other_than_good_is_unhealthy_of_kind_other() -> None:
    (card,) = parse_cnmon(fixture("mlu370-x8-unhealthy.txt"))
    assert card.health is Health.UNHEALTHY
    assert card.health_detail == "cnmon health: Device Bad"
    assert cause_key(card.health_detail) == "other"


def test_processes_per_card_in_mib() -> None:
    assert parse_cnmon_processes(fixture("mlu370-x4-procs.txt")) == {
        0: {402811: 16384, 402990: 1024},
        1: {},
    }
    assert parse_cnmon_processes(fixture("mlu370-x8.txt")) == {}  # no Processes group


def test_a_process_without_a_memory_figure_is_left_out_and_said() -> None:
    skipped: list[str] = []
    usage = parse_cnmon_processes(fixture("procs-no-memory.txt"), skipped)
    assert all(not per_pid for per_pid in usage.values()) or usage == {}
    assert len(skipped) == 1 and "MLU Memory Usage" in skipped[0]


def test_process_memory_by_card_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cnmon, "run_tool", _tool("mlu370-x4-procs.txt"))
    assert CnmonProbe().process_memory() == {
        "3F0A9C21-58B4-4D7E-A1C6-7E2B90D4F113": {402811: 16384, 402990: 1024},
        "3F0A9C21-58B4-4D7E-A1C6-7E2B90D4F2A8": {},
    }


def test_process_memory_that_cannot_be_told_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older cnmon: the monitor logs the error and measures nothing, so no replica is
    stopped on a guess."""
    monkeypatch.setattr(cnmon, "run_tool", _tool("mlu370-x8.txt"))
    with pytest.raises(ProbeError) as caught:
        CnmonProbe().process_memory()
    assert caught.value.kind is ProbeFailure.PARSE and "no 'Processes' group" in caught.value.detail


def test_a_process_row_without_a_figure_is_left_out_and_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cnmon, "run_tool", _tool("procs-no-memory.txt"))
    probe = CnmonProbe()
    usage = probe.process_memory()
    assert all(not per_pid for per_pid in usage.values())
    assert any("MLU Memory Usage" in why for why in probe.rows_skipped)
