# ruff: noqa: N802  (the fake mirrors EFML's own CamelCase C API)
"""The EFML probe against a fake libefml (the real one needs an Enflame card this machine lacks).

The fake has the C function names and fills the ctypes pointers and buffers the probe hands it,
returning efmlReturn_t codes, so the probe's ctypes plumbing runs as it would on the library.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from xpupool.probes import PROBES, Health, ProbeError, ProbeFailure, discover_host
from xpupool.probes.enflame_efml import ENV_LIBRARY, EnflameEfmlProbe, declare_prototypes

GIB = 1024**3
OK, NOT_SUPPORTED, LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED, FAIL = 0, 3, 4, 6, 254


def put(buffer: Any, text: str) -> int:
    buffer.value = text.encode()
    return OK


@dataclass
class Card:
    sku: str
    uuid: str
    bus: int  # PCI bus number; domain, device and function are 0
    arch: int  # efmlHwArch_t


class FakeEfml:
    """Two cards: an S60 (GCU300: EfmlGetDevTempV2) and a T20 (GCU210: EfmlGetDevTemp) whose
    power reading is not supported and which EfmlGetDevHealth calls unhealthy."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: dict[tuple[str, int | None], int] = {}  # (call, device) -> code
        self.cards = [
            Card(sku="S60", uuid="U60000080105", bus=0x3B, arch=2),
            Card(sku="T20", uuid="U20000080106", bus=0x86, arch=1),
        ]

    def _code(self, call: str, index: int | None = None) -> int:
        self.calls.append(call if index is None else f"{call}({index})")
        return self.fail.get((call, index), self.fail.get((call, None), OK))

    def EfmlInit(self, no_driver: bool) -> int:
        assert no_driver is False
        return self._code("EfmlInit")

    def EfmlShutdown(self) -> None:
        self.calls.append("EfmlShutdown")

    def EfmlErrorString(self, code: int, buffer: Any) -> int:
        texts = {DRIVER_NOT_LOADED: "Error, driver not loaded", NOT_SUPPORTED: "not supported"}
        return put(buffer, texts.get(code, "Error, operate fail"))

    def EfmlGetDriverVer(self, buffer: Any) -> int:
        return self._code("EfmlGetDriverVer") or put(buffer, "1.2.5.12")

    def EfmlGetDevCount(self, count: Any) -> int:
        count.contents.value = len(self.cards)
        return self._code("EfmlGetDevCount")

    def EfmlGetDevSKU(self, i: int, buffer: Any) -> int:
        return self._code("EfmlGetDevSKU", i) or put(buffer, self.cards[i].sku)

    def EfmlGetDevName(self, i: int, buffer: Any) -> int:
        return self._code("EfmlGetDevName", i) or put(buffer, "DTU")

    def EfmlGetDevUuid(self, i: int, buffer: Any) -> int:
        return self._code("EfmlGetDevUuid", i) or put(buffer, self.cards[i].uuid)

    def EfmlGetDevInfo(self, i: int, info: Any) -> int:
        info.contents.name = b"DTU"
        info.contents.vendor_id = 0x1E36
        info.contents.domain_id, info.contents.bus_id = 0, self.cards[i].bus
        info.contents.dev_id, info.contents.func_id = 0, 0
        return self._code("EfmlGetDevInfo", i)

    def EfmlGetDevMem(self, i: int, mem: Any) -> int:
        mem.contents.mem_total_size = 48 * GIB if i == 0 else 32 * GIB  # bytes
        mem.contents.mem_used = 1536 if i == 0 else 30720  # MiB
        return self._code("EfmlGetDevMem", i)

    def EfmlGetDevDtuUsage(self, i: int, usage: Any) -> int:
        usage.contents.value = 12.5 if i == 0 else 97.0
        return self._code("EfmlGetDevDtuUsage", i)

    def EfmlGetDevPwr(self, i: int, power: Any) -> int:
        if i == 1:
            return self._code("EfmlGetDevPwr", i) or NOT_SUPPORTED
        power.contents.pwr_capability = 300.0
        power.contents.cur_pwr_consumption = 87.5
        return self._code("EfmlGetDevPwr", i)

    def EfmlGetHwArch(self, i: int, arch: Any) -> int:
        arch.contents.value = self.cards[i].arch
        return self._code("EfmlGetHwArch", i)

    def EfmlGetDevTempV2(self, i: int, thermal: Any) -> int:
        thermal.contents.cur_asic_temp = 41.0
        thermal.contents.cur_mem_temp = 39.0
        thermal.contents.cur_board_temp = 35.0
        return self._code("EfmlGetDevTempV2", i)

    def EfmlGetDevTemp(self, i: int, thermal: Any) -> int:
        thermal.contents.cur_dev_temp = 52.0
        thermal.contents.cur_hbm0_temp = 48.0
        return self._code("EfmlGetDevTemp", i)

    def EfmlGetDevHealth(self, i: int, healthy: Any) -> int:
        healthy.contents.value = i == 0
        return self._code("EfmlGetDevHealth", i)


def test_two_cards_read_with_units_converted() -> None:
    fake = FakeEfml()
    probe = EnflameEfmlProbe(library=fake)
    s60, t20 = probe.discover()

    assert (s60.vendor, s60.model, s60.canonical_model) == ("enflame", "S60", "S60")
    assert (s60.uuid, s60.index) == ("GCU-U60000080105", 0)
    assert s60.memory_total_mib == 49152  # 48 GiB in bytes -> MiB
    assert s60.memory_used_mib == 1536  # the library gives MiB already
    assert (s60.utilization_pct, s60.power_watts, s60.temperature_c) == (12.5, 87.5, 41.0)
    assert s60.driver_version == "1.2.5.12"
    assert s60.health is Health.HEALTHY and s60.to_device().healthy is True
    assert s60.numa_node is None  # this fake library predates EfmlGetNumaNode
    assert probe.bus_ids == {"GCU-U60000080105": "0000:3b:00.0", "GCU-U20000080106": "0000:86:00.0"}

    assert (t20.model, t20.index, t20.memory_total_mib, t20.memory_used_mib) == (
        "T20",
        1,
        32768,
        30720,
    )
    assert t20.temperature_c == 52.0  # GCU210: EfmlGetDevTemp, not V2
    assert "EfmlGetDevTempV2(1)" not in fake.calls and "EfmlGetDevTemp(1)" in fake.calls
    assert t20.health is Health.UNHEALTHY and t20.to_device().healthy is False
    assert fake.calls[0] == "EfmlInit" and fake.calls[-1] == "EfmlShutdown"


def test_refused_metric_is_none_with_a_named_reason_not_zero() -> None:
    probe = EnflameEfmlProbe(library=FakeEfml())
    t20 = probe.discover()[1]
    assert t20.power_watts is None
    assert any(
        s.startswith("GCU-U20000080106 power")
        and "EfmlGetDevPwr returned 3 (EFML_ERROR_NOT_SUPPORTED)" in s
        for s in probe.skipped
    )


def test_missing_library_is_a_clear_probe_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "libefml.so"
    monkeypatch.setenv(ENV_LIBRARY, str(missing))
    probe = EnflameEfmlProbe()  # the real ctypes.CDLL, on a path that does not exist
    assert probe.available() is False
    with pytest.raises(ProbeError) as exc:
        probe.discover()
    assert exc.value.vendor == "enflame" and exc.value.kind is ProbeFailure.LIBRARY_MISSING
    assert str(missing) in exc.value.detail and ENV_LIBRARY in exc.value.detail


def test_a_file_that_is_not_a_library_is_reported_as_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bogus = tmp_path / "libefml.so"
    bogus.write_text("not an ELF file")
    monkeypatch.setenv(ENV_LIBRARY, str(bogus))
    with pytest.raises(ProbeError) as exc:
        EnflameEfmlProbe().discover()
    assert exc.value.kind is ProbeFailure.LIBRARY_MISSING and str(bogus) in exc.value.detail


def test_default_names_are_all_tried_and_permission_is_told_apart() -> None:
    tried: list[str] = []

    def loader(path: str) -> Any:
        tried.append(path)
        if path == "/usr/lib/libefml.so":
            raise OSError(f"{path}: cannot open shared object file: Permission denied")
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    probe = EnflameEfmlProbe(loader=loader)
    with pytest.raises(ProbeError) as exc:
        probe.discover()
    assert tried[:3] == ["libefml.so", "libefml.so.1.0.0", "/usr/lib/libefml.so"]
    assert exc.value.kind is ProbeFailure.PERMISSION


def test_init_failure_names_the_code() -> None:
    fake = FakeEfml()
    fake.fail[("EfmlInit", None)] = DRIVER_NOT_LOADED
    probe = EnflameEfmlProbe(library=fake)
    assert probe.available() is True  # the library is here; discover() says what is wrong
    with pytest.raises(ProbeError) as exc:
        probe.discover()
    assert exc.value.command == "EfmlInit" and exc.value.kind is ProbeFailure.TOOL_FAILED
    assert exc.value.detail == (
        "EfmlInit returned 6 (EFML_ERROR_DRIVER_NOT_LOADED): Error, driver not loaded"
    )
    assert "EfmlShutdown" not in fake.calls  # nothing to shut down after a failed init


def test_init_library_not_found_code_is_library_missing() -> None:
    fake = FakeEfml()
    fake.fail[("EfmlInit", None)] = LIBRARY_NOT_FOUND
    with pytest.raises(ProbeError) as exc:
        EnflameEfmlProbe(library=fake).discover()
    assert exc.value.kind is ProbeFailure.LIBRARY_MISSING


def test_one_card_failing_its_memory_read_fails_the_probe_with_the_call_and_card() -> None:
    """As the NVML and amdsmi probes do: capacity is required, so no half-read card is reported;
    the library is still shut down."""
    fake = FakeEfml()
    fake.fail[("EfmlGetDevMem", 1)] = FAIL
    with pytest.raises(ProbeError) as exc:
        EnflameEfmlProbe(library=fake).discover()
    assert exc.value.command == "EfmlGetDevMem" and exc.value.kind is ProbeFailure.TOOL_FAILED
    assert exc.value.detail.startswith("device 1: EfmlGetDevMem returned 254 (EFML_ERROR_FAIL)")
    assert fake.calls[-1] == "EfmlShutdown"


def test_device_count_failure_is_reported() -> None:
    fake = FakeEfml()
    fake.fail[("EfmlGetDevCount", None)] = FAIL
    with pytest.raises(ProbeError) as exc:
        EnflameEfmlProbe(library=fake).discover()
    assert exc.value.command == "EfmlGetDevCount" and "EFML_ERROR_FAIL" in exc.value.detail


def test_one_card_refusing_metrics_and_identity_still_reports_both_cards() -> None:
    fake = FakeEfml()
    for call in ("EfmlGetDevUuid", "EfmlGetDevSKU", "EfmlGetDevDtuUsage", "EfmlGetDevHealth"):
        fake.fail[(call, 0)] = NOT_SUPPORTED
    probe = EnflameEfmlProbe(library=fake)
    first, second = probe.discover()
    assert first.uuid == "enflame-pci-0000:3b:00.0"  # no UUID: from the PCI address
    assert first.model == "DTU" and first.canonical_model is None  # EfmlGetDevName fallback
    assert first.utilization_pct is None and first.health is Health.UNKNOWN
    assert first.to_device().healthy is True  # unknown is not unhealthy
    assert second.uuid == "GCU-U20000080106" and second.utilization_pct == 97.0


def test_uuid_falls_back_to_the_index_without_a_pci_address() -> None:
    fake = FakeEfml()
    fake.fail[("EfmlGetDevUuid", 1)] = NOT_SUPPORTED
    fake.fail[("EfmlGetDevInfo", 1)] = NOT_SUPPORTED
    assert EnflameEfmlProbe(library=fake).discover()[1].uuid == "enflame-1"


def test_a_call_the_library_lacks_is_named() -> None:
    class Old(FakeEfml):
        """A libefml without EfmlGetDevHealth: looking it up fails as on a ctypes.CDLL."""

        def __getattribute__(self, name: str) -> Any:
            if name == "EfmlGetDevHealth":
                raise AttributeError(name)
            return super().__getattribute__(name)

    probe = EnflameEfmlProbe(library=Old())
    assert probe.discover()[0].health is Health.UNKNOWN
    assert any("EfmlGetDevHealth: not exported" in s for s in probe.skipped)


def test_numa_node_is_read_where_the_library_has_it() -> None:
    class New(FakeEfml):
        def EfmlGetNumaNode(self, i: int, node: Any) -> int:
            node.contents.value = -1 if i == 1 else 0
            return OK

    first, second = EnflameEfmlProbe(library=New()).discover()
    assert (first.numa_node, second.numa_node) == (0, None)  # -1: no NUMA affinity


@pytest.mark.parametrize(
    ("sku", "expected"),
    [("S60", "S60"), ("Enflame S60", "S60"), ("s60", "S60"), ("T20", None), ("i20", None)],
)
def test_catalog_mapping_of_model_names(sku: str, expected: str | None) -> None:
    fake = FakeEfml()
    fake.cards[0].sku = sku
    device = EnflameEfmlProbe(library=fake).discover()[0]
    assert (device.model, device.canonical_model) == (sku, expected)


def test_prototypes_match_the_header_and_skip_absent_calls() -> None:
    class Function:
        restype: Any = ctypes.c_int
        argtypes: Any = None

    class Lib:
        EfmlGetDevMem = Function()
        EfmlShutdown = Function()

    lib = Lib()
    declare_prototypes(lib)  # Lib has no EfmlInit etc.: skipped, not an error
    assert lib.EfmlShutdown.restype is None
    (index, pointer) = lib.EfmlGetDevMem.argtypes
    assert index is ctypes.c_uint32 and pointer._type_.__name__ == "DevMemInfo"


def test_registered_and_harmless_on_a_host_without_the_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_LIBRARY, str(tmp_path / "libefml.so"))
    assert EnflameEfmlProbe in PROBES
    found = discover_host([EnflameEfmlProbe()])
    assert found.skipped == ["enflame"] and found.devices == [] and found.failures == []
