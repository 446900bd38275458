"""hy-smi JSON parser on both key generations, and discover() with run_tool patched at the seam."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.probes import hy_smi
from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure
from xpupool.probes.hy_smi import (
    ARGV,
    ARGV_NO_BUS,
    PIDS_ARGV,
    DcuProcess,
    HySmiProbe,
    parse_hy_smi_buses,
    parse_hy_smi_json,
    parse_hy_smi_pids,
)

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


def test_a_hy_smi_without_showbus_still_lists_its_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older hy-smi that fails the query on an unknown ``--showbus`` is asked again without
    it: the host keeps its cards, their render nodes by the index rule."""
    calls: list[tuple[str, ...]] = []

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        calls.append(tuple(argv))
        if "--showbus" in argv:
            raise ProbeError(vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "unknown option")
        return fixture("k100-new-keys.json")

    monkeypatch.setattr(hy_smi, "run_tool", run)
    probe = HySmiProbe()
    devices = probe.discover()
    assert calls == [ARGV, ARGV_NO_BUS]
    assert len(devices) == 2 and probe.bus_ids == {}


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = HySmiProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as caught:
        probe.discover()
    assert caught.value.kind is ProbeFailure.TOOL_MISSING
    assert caught.value.vendor == "hygon"


class HySmi:
    """run_tool's stand-in: the JSON query answers with ``cards``, --showpids with ``pids``."""

    def __init__(self, pids: str, cards: str = "k100-new-keys.json") -> None:
        self.pids, self.cards = pids, cards
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        self.calls.append(tuple(argv))
        return fixture(self.pids if tuple(argv) == PIDS_ARGV else self.cards)


def test_showpids_blocks_with_card_indices_and_mib() -> None:
    assert parse_hy_smi_pids(fixture("showpids.txt")) == [
        DcuProcess(pid=1840211, cards=(1,), vram_mib=57344),
        DcuProcess(pid=1840377, cards=(0,), vram_mib=1024),
        DcuProcess(pid=1902544, cards=(0, 1), vram_mib=30720),
        DcuProcess(pid=1902600, cards=(), vram_mib=1),
    ]
    assert parse_hy_smi_pids(fixture("showpids-none.txt")) == []


def test_showpids_that_cannot_be_read_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_hy_smi_pids("hy-smi: unrecognized arguments: --showpids\n")
    assert (
        caught.value.kind is ProbeFailure.PARSE and "expected 'PIDs for KFD" in caught.value.detail
    )
    assert caught.value.command == "hy-smi --showpids"


def test_a_block_that_cannot_be_read_is_left_out_and_said() -> None:
    skipped: list[str] = []
    assert parse_hy_smi_pids(fixture("showpids-no-vram.txt"), skipped) == []
    assert len(skipped) == 1 and "numeric 'VRAM USED(MiB)'" in skipped[0]


def test_process_memory_per_card_uuid_leaves_multi_card_processes_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1902544 holds cards 0 and 1 with one total: charging it to each card could stop it for
    memory it does not use, so it is not charged at all."""
    tool = HySmi("showpids.txt")
    monkeypatch.setattr(hy_smi, "run_tool", tool)
    probe = HySmiProbe()
    assert probe.process_memory() == {
        "0x2c5a8d13e0f4b671": {1840377: 1024},
        "0x2c5a8d13e0f4b9a2": {1840211: 57344},
    }
    tool.calls.clear()
    probe.process_memory()
    assert tool.calls == [PIDS_ARGV]  # cards known: the JSON query is not run again


def test_process_memory_with_no_process_lists_every_card_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hy_smi, "run_tool", HySmi("showpids-none.txt"))
    assert HySmiProbe().process_memory() == {"0x2c5a8d13e0f4b671": {}, "0x2c5a8d13e0f4b9a2": {}}


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("showpids-unknown-card.txt", "holds card(s) [7], which hy-smi does not list"),
        ("showpids-no-vram.txt", "VRAM USED(MiB)"),
    ],
)
def test_a_process_that_cannot_be_read_is_left_out_and_said(
    monkeypatch: pytest.MonkeyPatch, name: str, said: str
) -> None:
    """A misread charges no card, and costs no other process."""
    monkeypatch.setattr(hy_smi, "run_tool", HySmi(name))
    probe = HySmiProbe()
    usage = probe.process_memory()
    assert usage and all(7 not in per_pid for per_pid in usage.values())
    assert any(said in why for why in probe.rows_skipped), probe.rows_skipped


def test_a_forged_block_for_a_multi_card_process_charges_it_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1902544 holds cards 0 and 1 (one total, not charged); a block a job's name forged puts
    it on card 0 alone with a figure: listed twice there, so neither counts, and it is said."""
    forged = fixture("showpids.txt") + (
        "PID: 1902544\n\tPASID: 1\n\tHCU Index: ['0']\n\tVRAM USED(MiB): 99999\n"
    )

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        return forged if tuple(argv) == PIDS_ARGV else fixture("k100-new-keys.json")

    monkeypatch.setattr(hy_smi, "run_tool", run)
    probe = HySmiProbe()
    usage = probe.process_memory()
    assert all(1902544 not in per_pid for per_pid in usage.values()), usage
    assert any("1902544 is listed twice" in why for why in probe.rows_skipped)


def test_showbus_gives_each_cards_pci_address_for_its_render_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--showbus``'s ``PCI Bus``, bare or followed by the serial and OAM id: the address alone,
    lower case, by the card's UUID (the agent finds the render node by it)."""
    assert "--showbus" in ARGV
    text = fixture("k100-showbus.json")
    assert parse_hy_smi_buses(text) == {0: "0000:c1:00.0", 1: "0000:c2:00.0"}
    assert parse_hy_smi_buses(fixture("k100-new-keys.json")) == {}  # an older hy-smi: none
    monkeypatch.setattr(hy_smi, "run_tool", lambda vendor, argv, timeout_s=10.0: text)
    probe = HySmiProbe()
    devices = probe.discover()
    assert probe.bus_ids == {devices[0].uuid: "0000:c1:00.0", devices[1].uuid: "0000:c2:00.0"}
