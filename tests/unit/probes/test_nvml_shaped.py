"""Per-process memory through the libraries that copy NVML's C API (probes/nvml_shaped.py):
Iluvatar's libixml and Enflame's efml* calls, against fakes that fill the ctypes pointers and
arrays as the vendors' nvtop extractors declare them (no capture of either library exists here)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import pytest
from test_enflame_efml import FakeEfml

from xpupool.probes import ProbeError, ProbeFailure, ixsmi
from xpupool.probes.enflame_efml import EnflameEfmlProbe
from xpupool.probes.ixsmi import IxsmiProbe
from xpupool.probes.nvml_shaped import EFML_NEXT, IXML, NOT_AVAILABLE, CompatProcesses, Dialect

GIB = 1024**3


class FakeCompat:
    """An NVML-shaped library: ``procs[index]`` lists (pid, bytes) per device; ``prefix`` is
    ``nvml`` or ``efml``; ``versions``: which process calls it exports."""

    def __init__(self, dialect: Dialect, procs: list[list[tuple[int, int]]], **kw: Any) -> None:
        self.dialect = dialect
        self.procs = procs
        self.calls: list[str] = []
        self.fail: dict[str, int] = kw.get("fail", {})
        names = kw.get("process_calls", [n for n, _ in dialect.processes])
        for name in [dialect.init[0], dialect.count[0], dialect.handle[0], *names]:
            setattr(self, name, self._bound(name))

    def _bound(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            if name == self.dialect.init[0]:
                return 0
            if name == self.dialect.count[0]:
                args[0].contents.value = len(self.procs)
                return 0
            if name == self.dialect.handle[0]:
                index, out = args
                out.contents.value = index.value + 1  # a handle: index + 1 (never NULL)
                return 0
            handle, count, infos = args
            rows = self.procs[handle.value - 1]
            if infos is None:
                count.contents.value = len(rows)
                return 7 if rows else 0
            for i, (pid, used) in enumerate(rows):
                infos[i].pid, infos[i].used = pid, used
            count.contents.value = len(rows)
            return 0

        return call

    def __getattr__(self, name: str) -> Any:
        if name == self.dialect.shutdown:
            return lambda: 0
        raise AttributeError(name)


def test_each_devices_processes_in_mib_with_unknown_figures_left_out() -> None:
    lib = FakeCompat(IXML, [[(11, 5 * GIB + 7), (12, NOT_AVAILABLE), (11, GIB)], []])
    assert CompatProcesses(IXML, lib).read() == {0: {11: 6 * 1024}, 1: {}}
    # asked first with room for none, then with room for the processes: NVML's protocol
    asks = [c for c in lib.calls if c == "nvmlDeviceGetComputeRunningProcesses"]
    assert len(asks) == 3  # device 0 twice, device 1 (no process) once


def test_an_older_efml_without_the_versioned_calls_is_read_with_the_v1_layout() -> None:
    lib = FakeCompat(
        EFML_NEXT, [[(21, 2 * GIB)]], process_calls=["efmlDeviceGetComputeRunningProcesses"]
    )
    assert CompatProcesses(EFML_NEXT, lib).read() == {0: {21: 2048}}


def test_a_failing_call_and_a_missing_library_are_probe_errors_naming_them() -> None:
    lib = FakeCompat(IXML, [[(11, GIB)]], fail={"nvmlDeviceGetComputeRunningProcesses": 999})
    with pytest.raises(ProbeError) as failed:
        CompatProcesses(IXML, lib).read()
    assert failed.value.command == "nvmlDeviceGetComputeRunningProcesses"
    assert failed.value.kind is ProbeFailure.TOOL_FAILED

    def missing(path: str) -> Any:
        raise OSError(f"{path}: cannot open shared object file")

    with pytest.raises(ProbeError) as absent:
        CompatProcesses(IXML, loader=missing).read()
    assert absent.value.kind is ProbeFailure.LIBRARY_MISSING
    assert "libixml.so" in absent.value.detail


def _ixsmi(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "fixtures/probes/ixsmi/bi_v150_4x.txt").read_text()

    def run(vendor: str, argv: Sequence[str], timeout_s: float = 10.0) -> str:
        return text

    monkeypatch.setattr(ixsmi, "run_tool", run)


def test_iluvatar_rows_are_charged_to_the_card_ixsmi_lists_at_that_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _ixsmi(monkeypatch)
    procs: list[list[tuple[int, int]]] = [[], [(31, 3 * GIB)], [], [], [(32, GIB)]]
    probe = IxsmiProbe(CompatProcesses(IXML, FakeCompat(IXML, procs)))
    assert probe.process_memory() == {}  # nothing listed yet: nothing to charge
    devices = probe.discover()
    used = probe.process_memory()
    assert used[devices[1].uuid] == {31: 3072}
    assert len(used) == 4  # index 4: a device ixsmi did not list, left out
    assert IxsmiProbe.prints_names  # the rows go through the agent's device-node check


def test_enflame_rows_come_from_the_same_library_as_the_probe() -> None:
    fake = FakeEfml()
    compat = FakeCompat(EFML_NEXT, [[(41, GIB)], [(42, 2 * GIB)]])
    for name in ("efmlInit_v2", "efmlDeviceGetCount_v2", "efmlDeviceGetHandleByIndex_v2"):
        setattr(fake, name, getattr(compat, name))
    fake.efmlDeviceGetComputeRunningProcesses_v3 = compat.efmlDeviceGetComputeRunningProcesses_v3
    fake.efmlShutdown = lambda: 0
    probe = EnflameEfmlProbe(library=fake)
    devices = probe.discover()
    assert probe.process_memory() == {devices[0].uuid: {41: 1024}, devices[1].uuid: {42: 2048}}


def test_the_structures_are_the_layouts_nvtop_declares() -> None:
    from xpupool.probes.nvml_shaped import ProcessInfoV1, ProcessInfoV2

    # unsigned int pid; unsigned long long used (8-aligned); two unsigned ints
    assert ctypes.sizeof(ProcessInfoV2) == 24 and ProcessInfoV2.used.offset == 8
    assert ctypes.sizeof(ProcessInfoV1) == 16


class FakeMxsml:
    """libmxsml's process calls for the cards at ``buses`` (device index = position); ``procs``
    as (pid, [(bus id as printed, bytes), ...])."""

    def __init__(self, buses: list[str], procs: list[tuple[int, list[tuple[str, int]]]]) -> None:
        self.buses = buses
        self.procs = procs

    def mxSmlInit(self) -> int:  # noqa: N802 (libmxsml's C names)
        return 0

    def mxSmlGetDeviceCount(self) -> int:  # noqa: N802
        return len(self.buses)

    def mxSmlGetNumberOfProcess(self, count: Any) -> int:  # noqa: N802
        count.contents.value = len(self.procs)
        return 0

    def mxSmlGetSingleGpuProcess(self, device: Any, count: Any, infos: Any) -> int:  # noqa: N802
        bus = self.buses[device.value]
        on = [(pid, gpus) for pid, gpus in self.procs if any(b.lower() == bus for b, _ in gpus)]
        for i, (pid, gpus) in enumerate(on):
            infos[i].pid, infos[i].gpus = pid, len(gpus)
            for j, (printed, used) in enumerate(gpus):
                infos[i].per_gpu[j].bdf, infos[i].per_gpu[j].used = printed.encode(), used
        count.contents.value = len(on)
        return 0


def test_metax_rows_are_named_by_the_cards_pci_address() -> None:
    from xpupool.probes.mx_smi import MxSmiProbe

    lib = FakeMxsml(
        ["0000:0f:00.0", "0000:01:00.0"],
        [
            (51, [("0000:0F:00.0", 2 * GIB)]),
            (52, [("0000:01:00.0", GIB), ("0000:0f:00.0", 3 * GIB)]),  # on two cards
        ],
    )
    assert MxSmiProbe(lib).process_memory() == {
        "metax-0000:0f:00.0": {51: 2048, 52: 3072},
        "metax-0000:01:00.0": {52: 1024},
    }
    assert MxSmiProbe.prints_names


def test_the_mxsml_layouts_are_the_ones_nvtop_declares() -> None:
    from xpupool.probes.mxsml_procs import ProcessGpuInfo, ProcessInfo

    assert ctypes.sizeof(ProcessGpuInfo) == 48  # char[32], unsigned int, (pad), unsigned long
    assert ProcessInfo.per_gpu.offset == 72 and ctypes.sizeof(ProcessInfo) == 72 + 64 * 48
