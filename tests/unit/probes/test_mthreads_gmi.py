"""mthreads-gmi JSON parser on community-derived fixtures, and discover() with run_tool patched."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import PROBES, mthreads_gmi
from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure
from xpupool.probes.mthreads_gmi import ARGV, MthreadsGmiProbe, parse_mthreads_gmi_json

FIXTURES = Path(__file__).parents[2] / "fixtures" / "probes" / "mthreads-gmi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_two_s4000_cards_with_padded_power_key() -> None:
    devices = parse_mthreads_gmi_json(fixture("s4000-2x.json"))
    assert devices[0] == DeviceInfo(
        vendor="mthreads",
        model="MTT S4000",
        uuid="GPU-5f1e2a7c-0b3d-4c61-9e8a-2d4f6b10c3a1",
        index=0,
        memory_total_mib=49152,
        canonical_model="MTT-S4000",
        memory_used_mib=1024,
        utilization_pct=35.0,
        power_watts=55.0,  # read from "Power Draw " (trailing space)
        temperature_c=45.0,
        driver_version="2.7.0",
        runtimes={"musa": "3.1.0"},
        health=Health.UNKNOWN,
    )
    second = devices[1]
    assert (second.index, second.memory_used_mib) == (1, 40960)
    assert (second.utilization_pct, second.power_watts, second.temperature_c) == (98.0, 402.5, 71.0)
    assert second.uuid == "GPU-9a4c0d2e-6f18-4b7a-8c35-e1b2d90f4e67"  # "Serial Number" N/A
    assert second.to_device().memory_mib == 49152


def test_gib_totals_na_values_and_int_index() -> None:
    devices = parse_mthreads_gmi_json(fixture("gib-na-int-index.json"))
    assert [d.index for d in devices] == [0, 1, 2]  # sorted by Index, not list position
    s4000, s80, unknown = devices
    assert (s4000.model, s4000.canonical_model) == ("MTT S4000", "MTT-S4000")
    assert (s4000.memory_total_mib, s4000.memory_used_mib) == (49152, 2048)  # "48GiB", "2 GiB"
    assert (s4000.utilization_pct, s4000.power_watts, s4000.temperature_c) == (0.0, 31.25, 38.0)
    assert s4000.uuid == "mthreads-pci-0000:01:00.0"  # no UUID or serial: from the bus id
    assert s4000.driver_version == "2.5.0"
    assert s4000.runtimes == {}  # no "MUSA Version" key
    assert (s80.canonical_model, s80.memory_total_mib) == ("MTT-S80", 16384)  # "16 GiB"
    assert s80.uuid == "MT2306S80A0042"  # "Serial Number" when no UUID
    # N/A is unknown, never zero
    assert s80.memory_used_mib is None
    assert s80.utilization_pct is None
    assert s80.power_watts is None
    assert s80.temperature_c is None
    # a model the catalog does not know, with no id and no sections besides memory
    assert (unknown.model, unknown.canonical_model) == ("MTT X300", None)
    assert unknown.uuid == "mthreads-2"
    assert unknown.memory_used_mib is None
    assert unknown.power_watts is None


@pytest.mark.parametrize(
    ("printed", "canonical_model"),
    [
        ("MTT S4000", "MTT-S4000"),
        ("MTT S3000", "MTT-S3000"),
        ("MTT S80", "MTT-S80"),
        ("MTT X300", None),
    ],
)
def test_product_name_maps_to_the_catalog(printed: str, canonical_model: str | None) -> None:
    text = json.dumps({"GPU": [{"Product Name": printed, "FB Memory Usage": {"Total": "32GiB"}}]})
    (device,) = parse_mthreads_gmi_json(text)
    assert (device.model, device.canonical_model) == (printed, canonical_model)


@pytest.mark.parametrize("text", ["", "  \n", fixture("empty.json"), '{"Attached GPUs": "0"}'])
def test_no_gpu_is_empty(text: str) -> None:
    assert parse_mthreads_gmi_json(text) == []


def test_cut_off_json_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_mthreads_gmi_json(fixture("broken.txt"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert caught.value.vendor == "mthreads"
    assert caught.value.command == "mthreads-gmi -q --json"
    assert "'GPU' list" in caught.value.detail
    assert "line" in caught.value.detail


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("[]", "got a JSON list"),
        ('{"Driver Version": "2.7.0"}', "expected a 'GPU' list"),
        ('{"GPU": "none"}', "'GPU': expected a list"),
        ('{"GPU": [42]}', "GPU[0]: expected an object"),
        ('{"GPU": [{"Index": "0", "FB Memory Usage": {"Total": "1MiB"}}]}', "'Product Name'"),
        ('{"GPU": [{"Index": "0", "Product Name": "MTT S4000"}]}', "'FB Memory Usage'"),
        (
            '{"GPU": [{"Product Name": "MTT S4000", "FB Memory Usage": {"Total": "N/A"}}]}',
            "'Total' size",
        ),
        (
            '{"GPU": [{"Product Name": "MTT S4000", "FB Memory Usage": {"Total": "lots"}}]}',
            "FB Memory Usage.Total: expected a size such as '49152MiB' or '48GiB', got 'lots'",
        ),
        (
            '{"GPU": [{"Index": "x", "Product Name": "MTT S4000",'
            ' "FB Memory Usage": {"Total": "1MiB"}}]}',
            "GPU[0]: Index: expected an integer, got 'x'",
        ),
        (
            '{"GPU": [{"Index": 0, "Product Name": "A", "FB Memory Usage": {"Total": "1MiB"}},'
            ' {"Index": "0", "Product Name": "B", "FB Memory Usage": {"Total": "1MiB"}}]}',
            "Index 0 listed twice",
        ),
    ],
)
def test_malformed_input_is_a_parse_error(text: str, detail: str) -> None:
    with pytest.raises(ProbeError) as caught:
        parse_mthreads_gmi_json(text)
    assert caught.value.kind is ProbeFailure.PARSE
    assert detail in caught.value.detail


def test_lone_gpu_object_and_bare_number_sizes() -> None:
    text = (
        '{"GPU": {"Product Name": "MTT S4000", "FB Memory Usage": {"Total": 49152, "Used": "512"},'
        ' "Power Readings": {"Power Draw": 60}, "MUSA Version": "4.0.0"}}'
    )
    (device,) = parse_mthreads_gmi_json(text)
    assert (device.index, device.memory_total_mib, device.memory_used_mib) == (0, 49152, 512)
    assert device.power_watts == 60.0
    assert device.runtimes == {"musa": "4.0.0"}
    assert device.driver_version is None
    assert device.uuid == "mthreads-0"


def test_discover_runs_one_json_query(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        calls.append(tuple(argv))
        return fixture("s4000-2x.json")

    monkeypatch.setattr(mthreads_gmi, "run_tool", run)
    devices = MthreadsGmiProbe().discover()
    assert calls == [ARGV] == [("mthreads-gmi", "-q", "--json")]
    assert [d.index for d in devices] == [0, 1]


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = MthreadsGmiProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as caught:
        probe.discover()
    assert caught.value.kind is ProbeFailure.TOOL_MISSING
    assert caught.value.vendor == "mthreads"


def test_registered_as_a_host_probe() -> None:
    assert MthreadsGmiProbe in PROBES
    assert MthreadsGmiProbe.vendor == "mthreads"
