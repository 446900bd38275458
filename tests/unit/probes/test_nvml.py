"""The NVML probe against a fake NVML library (the real one needs a GPU this machine lacks)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from xpupool.probes import Health, ProbeError, ProbeFailure
from xpupool.probes.nvml import NvmlProbe

GIB = 1024**3


class NVMLError(Exception):
    def __init__(self, text: str, value: int = 999) -> None:
        super().__init__(text)
        self.value = value  # pynvml's NVMLError carries the nvmlReturn_t here


@dataclass(frozen=True)
class MigDevice:
    """A MIG device handle of the fake: its card, its index there, and its GPU instance's
    geometry (GPU slices, compute slices, first memory slice, memory slices, MiB)."""

    card: int
    index: int
    gpu_slices: int
    compute_slices: int
    start: int
    size: int
    mib: int


class FakeNvml:
    """Four H100s: NVLink pairs (0,1) and (2,3); GPU 2 in MIG mode; GPU 3 has no power reading
    and a pending row remap. Faults a test injects: ``ecc`` (volatile uncorrectable errors per
    index), ``lost`` (indices NVML answers GPU_IS_LOST for), ``xids`` ((index, XID) events the
    event set hands out, then a timeout), ``no_remap`` (indices without remapped rows, as
    before A100) with ``retire_pending``. ``mig`` cuts instances on a card in MIG mode (by card
    index, as ``(gpu slices, compute slices, start, memory slices, MiB)``), which NVML then
    lists through its MIG calls; without it GPU 2 is in MIG mode with no instance cut."""

    NVML_TEMPERATURE_GPU = 0
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    nvmlEventTypeXidCriticalError = 8  # noqa: N815 (pynvml's name)

    def __init__(self, count: int = 4) -> None:
        self.count = count
        self.calls: list[str] = []
        self.ecc: dict[int, int] = {}
        self.lost: set[int] = set()
        self.xids: list[tuple[int, int]] = []
        self.registered: list[int] = []
        self.no_remap: set[int] = set()
        self.retire_pending: set[int] = set()
        self.mig: dict[int, list[tuple[int, int, int, int, int]]] = {}

    def _alive(self, h: int) -> None:
        if h in self.lost:
            raise NVMLError("GPU is lost", self.NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int | MigDevice) -> str:
        if isinstance(h, MigDevice):
            return f"MIG-{h.card:02d}{h.index:02d}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
        return f"GPU-{h:04d}"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")

    def nvmlDeviceGetName(self, h: int) -> str:
        self._alive(h)
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int | MigDevice) -> SimpleNamespace:
        if isinstance(h, MigDevice):
            return SimpleNamespace(total=h.mib * 1024 * 1024, used=0)
        return SimpleNamespace(total=81559 * 1024 * 1024, used=(h + 1) * GIB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=10 * h)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 3:
            raise NVMLError("Not Supported")
        return 70_000 + h

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 30 + h

    def nvmlDeviceGetAttributes(self, h: int | MigDevice) -> SimpleNamespace:
        if isinstance(h, MigDevice):
            return SimpleNamespace(
                multiprocessorCount=16 * h.gpu_slices,
                gpuInstanceSliceCount=h.gpu_slices,
                computeInstanceSliceCount=h.compute_slices,
            )
        return SimpleNamespace(multiprocessorCount=132)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, i: int) -> MigDevice:
        cut = self.mig.get(h, [])
        if i >= len(cut):
            raise NVMLError("Not Found", 6)
        return MigDevice(h, i, *cut[i])

    def nvmlDeviceGetGpuInstanceId(self, mig: MigDevice) -> tuple[int, int]:
        return (mig.card, mig.index)

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi: tuple[int, int]) -> MigDevice:
        return MigDevice(h, gi[1], *self.mig[h][gi[1]])

    def nvmlGpuInstanceGetInfo(self, gi: MigDevice) -> SimpleNamespace:
        return SimpleNamespace(placement=SimpleNamespace(start=gi.start, size=gi.size))

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return 0 if h < 2 else 1

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return (1, 1) if h == 2 else (0, 0)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 2:
            raise NVMLError("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> SimpleNamespace:
        partner = h ^ 1  # 0<->1, 2<->3
        return SimpleNamespace(busId=f"00000000:{0x18 + partner:02X}:00.0")

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        if h in self.no_remap:
            raise NVMLError("Not Supported", 3)
        return (0, 0, 1, 0) if h == 3 else (0, 0, 0, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return int(h in self.retire_pending)

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)  # uncorrected, volatile
        return self.ecc.get(h, 0)

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, event_set: str) -> None:
        assert kinds == self.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(h)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        if not self.xids:
            time.sleep(min(timeout_ms, 20) / 1000)  # as NVML waits, bounded for the tests
            raise NVMLError("Timeout", self.NVML_ERROR_TIMEOUT)
        h, xid = self.xids.pop(0)
        return SimpleNamespace(device=h, eventType=8, eventData=xid)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        if h == 0:
            return [
                SimpleNamespace(pid=4242, usedGpuMemory=2 * GIB),
                SimpleNamespace(pid=4243, usedGpuMemory=None),
            ]
        return []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        raise NVMLError("Not Supported")


def test_discovers_identity_capacity_metrics_and_topology() -> None:
    fake = FakeNvml()
    probe = NvmlProbe(library=fake)  # type: ignore[arg-type]
    devices = probe.discover()
    assert [d.uuid for d in devices] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]
    first = devices[0]
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert first.canonical_model == "H100-SXM5-80GB"
    assert first.memory_total_mib == 81559 and first.memory_used_mib == 1024
    assert first.compute_units == 132
    assert first.driver_version == "550.54.15" and first.runtimes == {"cuda": "12.4"}
    assert first.power_watts == 70.0 and first.temperature_c == 30.0
    assert first.peers == ("GPU-0001",) and devices[1].peers == ("GPU-0000",)
    assert first.link_group == devices[1].link_group == "nvlink-0"
    assert devices[2].link_group == devices[3].link_group == "nvlink-1"
    assert (first.numa_node, devices[3].numa_node) == (0, 1)
    assert devices[2].mig_mode is True and first.mig_mode is False
    assert fake.calls == ["init", "shutdown"]


def test_unreadable_metric_is_none_with_a_reason_not_zero() -> None:
    probe = NvmlProbe(library=FakeNvml())  # type: ignore[arg-type]
    last = probe.discover()[3]
    assert last.power_watts is None
    assert any("GPU-0003 power" in s and "Not Supported" in s for s in probe.skipped)


def test_pending_row_remap_marks_the_gpu_unhealthy() -> None:
    devices = NvmlProbe(library=FakeNvml()).discover()  # type: ignore[arg-type]
    assert devices[3].health is Health.UNHEALTHY and "pending" in devices[3].health_detail
    assert devices[0].health is Health.HEALTHY
    assert devices[3].to_device().healthy is False


def test_missing_library_is_a_clear_probe_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: object, **kwargs: object) -> object:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    probe = NvmlProbe()
    assert probe.available() is False
    with pytest.raises(ProbeError) as exc:
        probe.discover()
    assert exc.value.kind is ProbeFailure.LIBRARY_MISSING and exc.value.vendor == "nvidia"


def test_init_failure_is_reported_not_raised_raw() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise NVMLError("Driver Not Loaded")

    probe = NvmlProbe(library=NoDriver())  # type: ignore[arg-type]
    assert probe.available() is False
    with pytest.raises(ProbeError) as exc:
        probe.discover()
    assert exc.value.command == "nvmlInit" and "Driver Not Loaded" in exc.value.detail


def test_process_memory_per_device_skips_processes_without_a_figure() -> None:
    probe = NvmlProbe(library=FakeNvml())  # type: ignore[arg-type]
    usage = probe.process_memory()
    assert usage["GPU-0000"] == {4242: 2048}
    assert usage["GPU-0001"] == {}
    assert any("GraphicsRunningProcesses" in s for s in probe.skipped)


def test_a_card_in_mig_mode_is_reported_as_its_instances() -> None:
    fake = FakeNvml()
    # GPU 2 cut as the guide's 3g.40gb at 0, 2g.20gb at 4, and a 1g.10gb whose compute
    # instance is the whole GPU instance; one MIG device index left empty between them
    fake.mig[2] = [(3, 3, 0, 4, 40192), (2, 2, 4, 2, 19968), (1, 1, 6, 1, 9728)]
    devices = NvmlProbe(library=fake).discover()  # type: ignore[arg-type]
    assert "GPU-0002" not in [d.uuid for d in devices]
    cut = [d for d in devices if d.partition_of == "GPU-0002"]
    assert [(d.partition, d.partition_start) for d in cut] == [
        ("3g.40gb", 0),
        ("2g.20gb", 4),
        ("1g.10gb", 6),
    ]
    assert cut[0].uuid.startswith("MIG-") and cut[0].memory_total_mib == 40192
    assert cut[0].index == 2 and cut[0].compute_units == 48
    device = cut[0].to_device()
    assert (device.partition, device.partition_of, device.max_tasks) == ("3g.40gb", "GPU-0002", 1)
    assert [d.uuid for d in devices if d.partition is None] == ["GPU-0000", "GPU-0001", "GPU-0003"]


def test_a_compute_instance_smaller_than_its_gpu_instance_is_named_so() -> None:
    fake = FakeNvml()
    fake.mig[2] = [(3, 1, 0, 4, 40192)]
    devices = NvmlProbe(library=fake).discover()  # type: ignore[arg-type]
    assert [d.partition for d in devices if d.partition] == ["1c.3g.40gb"]
