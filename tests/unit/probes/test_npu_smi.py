"""npu-smi parsers on recorded-format fixtures, and discover() with run_tool patched at the seam."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import npu_smi
from xpupool.probes.base import Health, ProbeError, ProbeFailure
from xpupool.probes.npu_smi import (
    NpuChipRow,
    NpuProcess,
    NpuSmiProbe,
    parse_npu_board,
    parse_npu_common,
    parse_npu_memory,
    parse_npu_processes,
    parse_npu_smi_info,
)
from xpupool.probes.npu_smi_vnpu import parse_vnpu_info

FIXTURES = Path(__file__).parents[2] / "fixtures" / "probes" / "npu-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_910b_eight_chips_one_row_pair_each() -> None:
    rows = parse_npu_smi_info(fixture("910b-8chips.txt"))
    assert [r.npu_id for r in rows] == list(range(8))
    assert rows[0] == NpuChipRow(
        npu_id=0,
        chip_id=0,
        name="910B3",
        health="OK",
        power_watts=92.4,
        temperature_c=37.0,
        bus_id="0000:C1:00.0",
        aicore_pct=0.0,
        memory_used_mib=3392,
        memory_total_mib=65536,
        logic_id=None,
        driver_version="24.1.rc2",
    )
    assert rows[7].bus_id == "0000:42:00.0"
    assert rows[7].memory_used_mib == 3388


def test_five_digit_used_value_without_space_before_slash() -> None:
    """npu-smi prints used as %-5d, so 61420 runs into the '/': '61420/ 65536'."""
    text = fixture("910b-five-digit-used.txt")
    assert "61420/ 65536" in text
    rows = parse_npu_smi_info(text)
    assert [(r.memory_used_mib, r.memory_total_mib) for r in rows] == [
        (61420, 65536),
        (9012, 65536),
    ]
    assert [r.aicore_pct for r in rows] == [87.0, 91.0]
    assert rows[1].health == "Warning"


def test_310p_two_chips_per_card_with_logical_ids_and_na_power() -> None:
    rows = parse_npu_smi_info(fixture("310p.txt"))
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in rows] == [
        (1, 0, 0),
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 3),
    ]
    assert all(r.power_watts is None for r in rows)
    assert [r.memory_used_mib for r in rows] == [1712, 1689, 15023, 1703]
    assert {r.memory_total_mib for r in rows} == {44280}
    assert rows[3].health == "Alarm"
    assert rows[0].driver_version == "23.0.0"


@pytest.mark.parametrize("text", ["", "   \n", "There is no NPU card on this server.\n"])
def test_no_device_output_is_empty(text: str) -> None:
    assert parse_npu_smi_info(text) == []


def test_header_without_rows_is_empty() -> None:
    assert parse_npu_smi_info(fixture("empty.txt")) == []


def test_npu_row_without_chip_row_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_npu_smi_info(fixture("broken.txt"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert caught.value.vendor == "huawei"
    assert "chip row after NPU 0" in caught.value.detail


def test_text_without_table_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_npu_smi_info("dcmi module initialize failed. ret is -8005\n")
    assert caught.value.kind is ProbeFailure.PARSE
    assert "table header" in caught.value.detail


def test_board_fields() -> None:
    board = parse_npu_board(fixture("board-0.txt"))
    assert board["Serial Number"] == "102431077420"
    assert board["Software Version"] == "24.1.rc2"
    assert board["Firmware Version"] == "7.5.0.1.129"
    assert board["PCIe Bus Info"] == "0000:C1:00.0"
    assert board["Chip Count"] == "1"


def test_board_without_npu_id_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_npu_board("Usage: npu-smi info -t board -i id\n")
    assert caught.value.kind is ProbeFailure.PARSE


def test_memory_capacity_per_chip() -> None:
    assert parse_npu_memory(fixture("memory-0.txt")) == {0: 65536}


def test_memory_without_capacity_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_npu_memory("\tNPU ID : 0\n")
    assert caught.value.kind is ProbeFailure.PARSE


def test_common_drops_mcu_block() -> None:
    common = parse_npu_common(fixture("common-0.txt"))
    assert list(common) == [0]
    assert common[0]["Aicore Count"] == "20"
    assert common[0]["NPU Real-time Power(W)"] == "92.4"


class FakeNpuSmi:
    """Stands in for run_tool: answers each argv from a fixture or fails like a real tool."""

    def __init__(self, summary: str, details: bool) -> None:
        self.summary = summary
        self.details = details
        self.calls: list[list[str]] = []

    def __call__(self, vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        self.calls.append(list(argv))
        if list(argv) == ["npu-smi", "info"]:
            return fixture(self.summary)
        if not self.details:
            raise ProbeError(vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "not supported")
        kind = argv[3]
        return fixture(f"{kind}-0.txt")


def test_discover_910b_combines_table_board_memory_common(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNpuSmi("910b-five-digit-used.txt", details=True)
    monkeypatch.setattr(npu_smi, "run_tool", fake)
    devices = NpuSmiProbe().discover()
    assert len(devices) == 2
    first, second = devices
    assert first.vendor == "huawei"
    assert first.model == "910B3"
    assert first.canonical_model == "910B3"
    assert first.uuid == "102431077420"
    assert first.index == 0
    assert first.memory_total_mib == 65536
    assert first.memory_used_mib == 61420
    assert first.compute_units == 20
    assert first.utilization_pct == 87.0
    assert first.power_watts == 318.6
    assert first.temperature_c == 52.0
    assert first.driver_version == "24.1.rc2"
    assert first.runtimes == {}
    assert first.link_group == "hccs"
    assert first.health is Health.HEALTHY
    assert first.health_detail == ""
    assert second.health is Health.UNHEALTHY
    assert second.health_detail == "npu-warning: npu-smi health: Warning"
    assert ["npu-smi", "info", "-t", "board", "-i", "1"] in fake.calls


def test_discover_310p_tolerates_unsupported_detail_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(npu_smi, "run_tool", FakeNpuSmi("310p.txt", details=False))
    devices = NpuSmiProbe().discover()
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert [d.uuid for d in devices] == [
        "ascend-0000:01:00.0-0",
        "ascend-0000:01:00.0-1",
        "ascend-0000:81:00.0-0",
        "ascend-0000:81:00.0-1",
    ]
    assert devices[0].canonical_model == "310P3"
    assert devices[0].link_group is None
    assert devices[0].compute_units is None
    assert devices[0].driver_version == "23.0.0"
    assert devices[3].health is Health.UNHEALTHY
    assert devices[3].health_detail == "npu-alarm: npu-smi health: Alarm"


def test_discover_raises_on_timeout_of_a_detail_query(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        if list(argv) == ["npu-smi", "info"]:
            return fixture("910b-8chips.txt")
        raise ProbeError(vendor, " ".join(argv), ProbeFailure.TIMEOUT, "no answer in 10 s")

    monkeypatch.setattr(npu_smi, "run_tool", run)
    with pytest.raises(ProbeError) as caught:
        NpuSmiProbe().discover()
    assert caught.value.kind is ProbeFailure.TIMEOUT


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = NpuSmiProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as caught:
        probe.discover()
    assert caught.value.kind is ProbeFailure.TOOL_MISSING
    assert caught.value.command == "npu-smi info"


def test_process_table_rows_in_mib() -> None:
    assert parse_npu_processes(fixture("910b-five-digit-used.txt")) == [
        NpuProcess(npu_id=0, chip_id=0, pid=2210417, name="python3", memory_mib=57934),
        NpuProcess(npu_id=1, chip_id=0, pid=2210418, name="python3", memory_mib=5498),
    ]
    assert parse_npu_processes(fixture("910b-8chips.txt")) == []  # "No running processes found"
    assert [(p.npu_id, p.chip_id, p.pid) for p in parse_npu_processes(fixture("310p.txt"))] == [
        (2, 0, 90417)
    ]


def test_process_table_read_by_its_header_inside_a_container() -> None:
    """The container variant adds 'Process id in container'; the host PID is what maps to a
    cgroup, and a process may print no name."""
    procs = parse_npu_processes(fixture("910b-procs-container.txt"))
    assert [(p.pid, p.name, p.memory_mib) for p in procs] == [
        (3120551, "python3", 40960),
        (3120552, "", 2048),
        (3120790, "mindie_llm_b", 5498),
    ]


def test_a_missing_process_table_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_npu_processes(fixture("310p-no-process-table.txt"))
    assert caught.value.kind is ProbeFailure.PARSE
    assert "expected the process table" in caught.value.detail


def test_a_cut_row_or_one_of_the_wrong_shape_is_left_out_and_said() -> None:
    """A name with a newline cuts its row: that row is lost, never the rows around it."""
    skipped: list[str] = []
    assert parse_npu_processes(fixture("procs-truncated.txt"), skipped) == []
    assert len(skipped) == 1 and "process row cut off" in skipped[0]
    text = fixture("910b-five-digit-used.txt").replace("| 57934 ", "| NA    ")
    skipped.clear()
    assert [p.pid for p in parse_npu_processes(text, skipped)] == [2210418]
    assert len(skipped) == 1 and "expected a process row" in skipped[0]


def test_process_memory_per_chip_uuid_for_the_share_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNpuSmi("910b-procs-container.txt", details=False)
    monkeypatch.setattr(npu_smi, "run_tool", fake)
    probe = NpuSmiProbe()
    usage = probe.process_memory()  # no discover yet: it names the chips itself
    assert usage == {
        "ascend-0000:C1:00.0": {3120551: 40960, 3120552: 2048},
        "ascend-0000:C2:00.0": {3120790: 5498},
    }
    assert probe.discover()[0].uuid == "ascend-0000:C1:00.0"  # the same names as the inventory
    fake.calls.clear()
    probe.process_memory()
    assert fake.calls == [["npu-smi", "info"]]  # chips known: one call, no detail queries


def test_process_memory_lists_idle_chips_and_the_310p_logical_chips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(npu_smi, "run_tool", FakeNpuSmi("310p.txt", details=False))
    usage = NpuSmiProbe().process_memory()
    assert usage == {
        "ascend-0000:01:00.0-0": {},
        "ascend-0000:01:00.0-1": {},
        "ascend-0000:81:00.0-0": {90417: 13312},
        "ascend-0000:81:00.0-1": {},
    }


def test_process_memory_without_a_process_table_raises_rather_than_guess(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No table: nothing can be told (not "nothing runs"): the monitor logs the error and
    measures nothing this pass."""
    monkeypatch.setattr(npu_smi, "run_tool", FakeNpuSmi("310p-no-process-table.txt", details=False))
    with pytest.raises(ProbeError) as caught:
        NpuSmiProbe().process_memory()
    assert caught.value.kind is ProbeFailure.PARSE
    assert "expected the process table" in caught.value.detail


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("procs-unknown-npu.txt", "NPU 5 chip 0, which the device table does not list"),
        ("procs-truncated.txt", "process row cut off"),
    ],
)
def test_a_row_that_cannot_be_read_is_left_out_and_said(
    monkeypatch: pytest.MonkeyPatch, name: str, said: str
) -> None:
    """A misread row charges no memory to any card, and costs no other row."""
    monkeypatch.setattr(npu_smi, "run_tool", FakeNpuSmi(name, details=False))
    probe = NpuSmiProbe()
    usage = probe.process_memory()
    charged = {pid for per_pid in usage.values() for pid in per_pid}
    assert charged == ({2210417} if name == "procs-unknown-npu.txt" else set())
    assert any(said in why for why in probe.rows_skipped), probe.rows_skipped


def test_a_process_name_with_bars_is_kept_whole_and_charges_no_other_pid() -> None:
    """The name is the job's to choose: '|' in it must not shift the PID or memory columns."""
    text = fixture("910b-five-digit-used.txt").replace(
        "| python3                  | 57934", "| py|99999|thon          | 57934", 1
    )
    first = parse_npu_processes(text)[0]
    assert (first.pid, first.name, first.memory_mib) == (2210417, "py|99999|thon", 57934)
    container = fixture("910b-procs-container.txt").replace("| python3      |", "| a|1|b        |")
    assert parse_npu_processes(container)[0] == NpuProcess(0, 0, 3120551, "a|1|b", 40960)


def test_vnpu_listing_reads_ids_and_templates_by_header() -> None:
    assert parse_vnpu_info(fixture("info-vnpu-0.txt")) == []
    rows = parse_vnpu_info(fixture("info-vnpu-910b3.txt"))
    assert [(r.vnpu_id, r.template) for r in rows] == [
        (100, "vir05_1c_16g"),
        (101, "vir10_3c_32g"),
        (102, "vir99_9c_99g"),
    ]


def test_a_chip_with_vnpus_is_reported_as_its_vnpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNpuSmi("910b-five-digit-used.txt", details=True)

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        if list(argv[:4]) == ["npu-smi", "info", "-t", "info-vnpu"] and argv[5] == "0":
            fake.calls.append(list(argv))
            return fixture("info-vnpu-910b3.txt")
        return fake(vendor, argv, timeout_s)

    monkeypatch.setattr(npu_smi, "run_tool", run)
    probe = NpuSmiProbe()
    devices = probe.discover()
    cut = [d for d in devices if d.partition is not None]
    assert [(d.uuid, d.index, d.partition, d.memory_total_mib) for d in cut] == [
        ("102431077420-vnpu100", 100, "vir05_1c_16g", 16384),
        ("102431077420-vnpu101", 101, "vir10_3c_32g", 32768),
    ]
    assert all(d.partition_of == "102431077420" for d in cut)
    # NPU 0 serves through its vNPUs; NPU 1 lists none and is reported as itself (the fake's
    # boards all print one serial, so the chips are told apart by index)
    assert [d.index for d in devices if d.partition is None] == [1]
    assert any("vir99_9c_99g unknown" in s for s in probe.skipped)
    assert ["npu-smi", "info", "-t", "info-vnpu", "-i", "0", "-c", "0"] in fake.calls
