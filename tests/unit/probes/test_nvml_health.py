"""NVML health causes against the fake NVML (test_nvml.py's): XID events, volatile uncorrectable
ECC errors, remapped rows and retired pages, a GPU that is lost."""

from __future__ import annotations

import threading

from test_nvml import FakeNvml

from xpupool.probes import Health
from xpupool.probes.health_causes import cause_key, is_warning, xid_cause
from xpupool.probes.nvml import NvmlProbe
from xpupool.probes.nvml_xid import XidWatch


def probe_with(fake: FakeNvml) -> NvmlProbe:
    return NvmlProbe(library=fake)  # type: ignore[arg-type]


def test_xid_table_sorts_critical_from_application_errors() -> None:
    assert xid_cause(79) == (True, "xid-79: GPU has fallen off the bus")
    assert xid_cause(48)[0] and xid_cause(74)[0] and xid_cause(119)[0] and xid_cause(95)[0]
    assert xid_cause(13) == (False, "xid-13: graphics engine exception")
    assert not xid_cause(31)[0] and not xid_cause(94)[0]
    critical, cause = xid_cause(9999)  # not in NVIDIA's list: critical, as the device plugin
    assert critical and cause_key(cause) == "xid-9999"


def test_cause_keys_and_the_operators_warnings() -> None:
    assert cause_key("ecc-uncorrectable: 2 errors") == "ecc-uncorrectable"
    assert cause_key("npu-alarm: npu-smi health: Alarm") == "npu-alarm"
    assert cause_key("Fault: free text") == "other"
    assert is_warning("xid-94: contained", frozenset({"94"}))
    assert is_warning("ecc-uncorrectable: 1", frozenset({"ecc-uncorrectable"}))
    assert not is_warning("xid-79: off the bus", frozenset({"94", "xid-48"}))


def test_a_critical_xid_marks_the_card_unhealthy_once_taken() -> None:
    fake = FakeNvml()
    probe = probe_with(fake)
    stop = threading.Event()
    watch = probe.watch_xids(stop)
    try:
        assert watch is not None and sorted(fake.registered) == [0, 1, 2, 3]
        fake.xids = [(1, 13), (1, 79)]
        watch.poll(0)  # the thread may have taken them already: either way they are waiting
        devices = probe.discover()
        assert devices[1].health is Health.UNHEALTHY
        assert devices[1].health_detail == "xid-79: GPU has fallen off the bus"
        assert probe.discover()[1].health is Health.HEALTHY  # an event is read once
    finally:
        stop.set()


def test_an_application_xid_is_a_warning_on_a_healthy_card() -> None:
    fake = FakeNvml()
    watch = XidWatch(fake, {"GPU-0000": 0})
    fake.xids = [(0, 31)]
    assert watch.poll(0) == 1
    probe = probe_with(fake)
    probe.xids = watch
    first = probe.discover()[0]
    assert first.health is Health.HEALTHY and first.health_detail.startswith("xid-31: ")


def test_volatile_uncorrectable_ecc_errors_mark_it_unhealthy() -> None:
    fake = FakeNvml()
    fake.ecc = {2: 3}
    card = probe_with(fake).discover()[2]
    assert card.health is Health.UNHEALTHY
    assert card.health_detail.startswith("ecc-uncorrectable: 3 volatile uncorrectable")


def test_remapped_rows_and_retired_pages() -> None:
    fake = FakeNvml()
    fake.no_remap = {0, 1}
    fake.retire_pending = {1}
    devices = probe_with(fake).discover()
    assert devices[3].health_detail.startswith("row-remap-pending: ")
    assert devices[0].health is Health.HEALTHY  # no rows, no pages pending
    assert devices[1].health is Health.UNHEALTHY
    assert devices[1].health_detail.startswith("page-retire-pending: ")


def test_a_lost_gpu_is_reported_as_last_read_and_unhealthy() -> None:
    fake = FakeNvml()
    probe = probe_with(fake)
    assert probe.discover()[2].health is Health.HEALTHY
    fake.lost = {2}
    devices = probe.discover()
    assert [d.uuid for d in devices] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]
    lost = devices[2]
    assert lost.health is Health.UNHEALTHY and lost.health_detail.startswith("gpu-lost: ")
    assert lost.memory_used_mib is None and lost.memory_total_mib == 81559


def test_a_gpu_lost_before_its_first_reading_is_left_out_with_the_reason() -> None:
    fake = FakeNvml()
    fake.lost = {1}
    probe = probe_with(fake)
    assert [d.index for d in probe.discover()] == [0, 2, 3]
    assert any("GPU 1: lost before it was first read" in s for s in probe.skipped)


def test_no_xid_watch_without_nvml_and_no_error_either() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:  # noqa: N802 (NVML's name)
            raise RuntimeError("Driver Not Loaded")

    probe = probe_with(NoDriver())
    assert probe.watch_xids(threading.Event()) is None
    assert any("XID events: Driver Not Loaded" in s for s in probe.skipped)
    missing = NvmlProbe()
    missing.module_name = "no_such_nvml_module"  # type: ignore[misc]
    assert missing.watch_xids(threading.Event()) is None


def test_a_kind_no_probe_writes_counts_as_other() -> None:
    """The cause comes from an agent, which may be hostile: each made-up kind would be a new
    Prometheus label of the server's (``xpupool_device_health_events_total{cause}``)."""
    made_up = {cause_key(f"evil-{i}: x") for i in range(1000)}
    assert made_up == {"other"}
    assert cause_key("xid-123456: x") == "other"
    assert cause_key("npu-alarm: npu-smi health: Alarm") == "npu-alarm"
