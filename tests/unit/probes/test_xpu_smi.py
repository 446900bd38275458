"""xpu-smi: Kunlunxin table vs Intel discovery CSV, told apart by the output alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import Health, ProbeError, ProbeFailure, xpu_smi
from xpupool.probes.health_causes import cause_key
from xpupool.probes.xpu_smi import (
    XpuSmiProbe,
    parse_intel_health,
    parse_intel_ps,
    parse_xpu_smi,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "probes" / "xpu-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_kunlunxin_table_gives_four_p800_with_exact_fields() -> None:
    devices = parse_xpu_smi(fixture("kunlunxin_p800_4x.txt"))
    assert [d.index for d in devices] == [0, 1, 2, 3]
    first = devices[0]
    assert first.vendor == "kunlunxin"
    assert first.model == "P800 OAM"
    assert first.canonical_model == "P800"
    assert first.uuid == "kunlunxin-00000000:1a:00.0"
    assert (first.memory_total_mib, first.memory_used_mib) == (98304, 61440)
    assert (first.utilization_pct, first.power_watts, first.temperature_c) == (87.0, 212.0, 43.0)
    assert first.driver_version == "5.0.21.26"
    assert first.runtimes == {"xpu-rt": "5.0.21"}
    assert first.health is Health.HEALTHY and first.compute_units is None  # ECC 0
    assert devices[2].memory_used_mib == 0 and devices[2].utilization_pct == 0.0


def test_kunlunxin_na_values_are_none_not_zero() -> None:
    last = parse_xpu_smi(fixture("kunlunxin_p800_4x.txt"))[3]
    assert last.temperature_c is None and last.power_watts is None
    assert last.utilization_pct is None
    assert last.memory_used_mib == 512


def test_kunlunxin_table_without_devices_is_empty() -> None:
    assert parse_xpu_smi(fixture("kunlunxin_empty.txt")) == []


def test_kunlunxin_truncated_row_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as info:
        parse_xpu_smi(fixture("kunlunxin_truncated.txt"))
    assert info.value.kind is ProbeFailure.PARSE and info.value.vendor == "kunlunxin"
    assert "Temp Pwr:Usage/Cap" in info.value.detail


def test_intel_dump_gives_four_max1550() -> None:
    devices = parse_xpu_smi(fixture("intel_max1550_4x.txt"))
    assert len(devices) == 4
    first = devices[0]
    assert first.vendor == "intel"
    assert first.model == "Intel(R) Data Center GPU Max 1550"
    assert first.canonical_model == "Max-1550"
    assert first.uuid == "01000000-0000-0000-0000-000000291b00"
    assert first.index == 0 and devices[3].index == 3
    assert first.memory_total_mib == 131072
    assert first.memory_used_mib is None and first.utilization_pct is None
    assert first.driver_version == "I915_24.1.11_PSB_240117.14"


def test_intel_dump_with_header_only_is_empty() -> None:
    header = fixture("intel_max1550_4x.txt").splitlines()[0]
    assert parse_xpu_smi(header + "\n") == []


def test_intel_row_without_memory_is_a_parse_error() -> None:
    text = 'Device ID,Device Name,Memory Physical Size\n0,"Intel(R) Data Center GPU Max 1550",\n'
    with pytest.raises(ProbeError) as info:
        parse_xpu_smi(text)
    assert info.value.kind is ProbeFailure.PARSE and info.value.vendor == "intel"


@pytest.mark.parametrize("text", ["", "garbage\n", "Intel(R) XPU System Management Interface"])
def test_neither_shape_is_a_parse_error_naming_both(text: str) -> None:
    with pytest.raises(ProbeError) as info:
        parse_xpu_smi(text)
    assert info.value.kind is ProbeFailure.PARSE
    assert "XPU-SMI" in info.value.detail and "Device ID" in info.value.detail


def fake_runner(outputs: dict[tuple[str, ...], str | ProbeError]) -> object:
    calls: list[tuple[str, ...]] = []

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        calls.append(tuple(argv))
        out = outputs[tuple(argv)]
        if isinstance(out, ProbeError):
            raise out
        return out

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_discover_on_kunlunxin_uses_the_plain_table(monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_runner({("xpu-smi",): fixture("kunlunxin_p800_4x.txt")})
    monkeypatch.setattr(xpu_smi, "run_tool", run)
    devices = XpuSmiProbe().discover()
    assert {d.vendor for d in devices} == {"kunlunxin"} and len(devices) == 4
    assert run.calls == [("xpu-smi",)]  # type: ignore[attr-defined]


def test_discover_on_intel_falls_through_help_to_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_runner(
        {
            ("xpu-smi",): fixture("intel_help.txt"),
            xpu_smi.INTEL_ARGV: fixture("intel_max1550_4x.txt"),
            xpu_smi.INTEL_HEALTH_ARGV: fixture("intel_health_ok.txt"),
        }
    )
    monkeypatch.setattr(xpu_smi, "run_tool", run)
    devices = XpuSmiProbe().discover()
    assert {d.vendor for d in devices} == {"intel"} and len(devices) == 4


def test_discover_on_intel_when_plain_call_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = ProbeError("kunlunxin", "xpu-smi", ProbeFailure.TOOL_FAILED, "exit code 1")
    run = fake_runner(
        {
            ("xpu-smi",): failed,
            xpu_smi.INTEL_ARGV: fixture("intel_max1550_4x.txt"),
            xpu_smi.INTEL_HEALTH_ARGV: fixture("intel_health_ok.txt"),
        }
    )
    monkeypatch.setattr(xpu_smi, "run_tool", run)
    assert [d.vendor for d in XpuSmiProbe().discover()] == ["intel"] * 4


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = XpuSmiProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as info:
        probe.discover()
    assert info.value.kind is ProbeFailure.TOOL_MISSING


def test_kunlunxin_uncorrectable_ecc_marks_the_xpu_unhealthy() -> None:
    devices = parse_xpu_smi(fixture("kunlunxin_p800_ecc.txt"))
    assert [d.health for d in devices] == [Health.HEALTHY, Health.UNHEALTHY]
    assert devices[1].health_detail == "ecc-uncorrectable: 3 volatile uncorrectable ECC error(s)"


def _intel(health: str | ProbeError) -> object:
    return fake_runner(
        {
            ("xpu-smi",): fixture("intel_help.txt"),
            xpu_smi.INTEL_ARGV: fixture("intel_max1550_4x.txt"),
            xpu_smi.INTEL_HEALTH_ARGV: health,
        }
    )


def test_intel_health_all_ok_is_healthy_and_unknown_parts_are_not_faults() -> None:
    health = parse_intel_health(fixture("intel_health_ok.txt"))
    assert health == dict.fromkeys(range(4), (Health.HEALTHY, ""))  # device 3: Xe Link Unknown


@pytest.mark.parametrize(
    ("name", "sick", "cause"),
    [
        ("intel_health_warning.txt", 1, "xpu-smi health: GPU Memory Temperature Warning"),
        ("intel_health_critical.txt", 2, "xpu-smi health: GPU Memory Critical"),
    ],
)
def test_intel_health_warning_or_critical_marks_that_card_unhealthy(
    monkeypatch: pytest.MonkeyPatch, name: str, sick: int, cause: str
) -> None:
    monkeypatch.setattr(xpu_smi, "run_tool", _intel(fixture(name)))
    devices = XpuSmiProbe().discover()
    assert [d.health for d in devices] == [
        Health.UNHEALTHY if d.index == sick else Health.HEALTHY for d in devices
    ]
    assert devices[sick].health_detail == cause
    assert cause_key(cause) == "other"


def test_an_unknown_status_word_is_unhealthy_and_all_unknown_is_unknown() -> None:
    text = fixture("intel_health_ok.txt")
    odd = parse_intel_health(text.replace("Status: Ok   ", "Status: Lost ", 1))
    assert odd[0] == (Health.UNHEALTHY, "xpu-smi health: GPU Core Temperature Lost")
    blind = parse_intel_health(
        text.replace("Status: Ok ", "Status: Unknown").replace("OK", "Unknown")
    )
    assert blind[0] == (Health.UNKNOWN, "")


@pytest.mark.parametrize(
    "health",
    [
        ProbeError("intel", "xpu-smi health -l", ProbeFailure.TOOL_FAILED, "unknown subcommand"),
        "Error: Level Zero initialization failed\n",
    ],
)
def test_a_failed_or_unreadable_health_query_leaves_health_unknown(
    monkeypatch: pytest.MonkeyPatch, health: str | ProbeError
) -> None:
    monkeypatch.setattr(xpu_smi, "run_tool", _intel(health))
    probe = XpuSmiProbe()
    devices = probe.discover()
    assert len(devices) == 4 and {d.health for d in devices} == {Health.UNKNOWN}
    assert len(probe.skipped) == 4 and "health" in probe.skipped[0]


def test_intel_ps_rows_per_process_and_device_in_mib() -> None:
    """MEM is kB, read as 1000 bytes (the smaller reading): 41943040 kB is 40000 MiB."""
    assert parse_intel_ps(fixture("intel_ps.txt")) == [
        (48211, 0, 40000),
        (48211, 1, 1000),
        (48390, 2, 2000),
        (48502, 0, 500),  # a command name with a space
    ]
    assert parse_intel_ps(fixture("intel_ps_none.txt")) == []


def test_intel_ps_without_its_header_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_intel_ps("Error: unknown subcommand ps\n")
    assert caught.value.kind is ProbeFailure.PARSE and "expected the header" in caught.value.detail


def test_a_cut_intel_ps_row_is_left_out_and_said() -> None:
    skipped: list[str] = []
    parse_intel_ps(fixture("intel_ps_cut.txt"), skipped)
    assert skipped and "expected '<pid> <command>" in skipped[0]


def _intel_with_ps(ps: str) -> object:
    return fake_runner(
        {
            ("xpu-smi",): fixture("intel_help.txt"),
            xpu_smi.INTEL_ARGV: fixture("intel_max1550_4x.txt"),
            xpu_smi.INTEL_HEALTH_ARGV: fixture("intel_health_ok.txt"),
            xpu_smi.INTEL_PS_ARGV: ps,
        }
    )


def test_intel_process_memory_per_card_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xpu_smi, "run_tool", _intel_with_ps(fixture("intel_ps.txt")))
    probe = XpuSmiProbe()
    uuids = [d.uuid for d in probe.discover()]
    assert probe.process_memory() == {
        uuids[0]: {48211: 40000, 48502: 500},
        uuids[1]: {48211: 1000},
        uuids[2]: {48390: 2000},
        uuids[3]: {},
    }


def test_intel_process_on_an_unknown_device_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    ps = (
        fixture("intel_ps_none.txt")
        + "48211     python3             7              0              1024\n"
    )
    monkeypatch.setattr(xpu_smi, "run_tool", _intel_with_ps(ps))
    probe = XpuSmiProbe()
    assert all(not per_pid for per_pid in probe.process_memory().values())
    assert any("device 7, which discovery does not list" in why for why in probe.rows_skipped)


def test_kunlunxin_processes_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_runner({("xpu-smi",): fixture("kunlunxin_p800_4x.txt")})
    monkeypatch.setattr(xpu_smi, "run_tool", run)
    probe = XpuSmiProbe()
    probe.discover()
    with pytest.raises(ProbeError) as caught:
        probe.process_memory()
    assert "Intel only" in caught.value.detail
    assert run.calls == [("xpu-smi",)]  # type: ignore[attr-defined]  # no second discover
