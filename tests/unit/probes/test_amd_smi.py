"""The amdsmi probe against a fake library with two xGMI-linked MI300X."""

from __future__ import annotations

import pytest

from xpupool.probes import ProbeError, ProbeFailure
from xpupool.probes.amd_smi import AmdSmiProbe


class FakeAmdSmi:
    def amdsmi_init(self) -> None: ...

    def amdsmi_shut_down(self) -> None: ...

    def amdsmi_get_processor_handles(self) -> list[str]:
        return ["h0", "h1"]

    def amdsmi_get_gpu_asic_info(self, h: str) -> dict[str, object]:
        return {"market_name": "AMD Instinct MI300X", "num_of_compute_units": 304}

    def amdsmi_get_gpu_device_uuid(self, h: str) -> str:
        return f"uuid-{h}"

    def amdsmi_get_gpu_vram_usage(self, h: str) -> dict[str, int]:
        return {"vram_total": 196592, "vram_used": 512}

    def amdsmi_get_gpu_activity(self, h: str) -> dict[str, object]:
        return {"gfx_activity": "N/A" if h == "h1" else 37}

    def amdsmi_get_power_info(self, h: str) -> dict[str, object]:
        return {"current_socket_power": 350}

    def amdsmi_get_gpu_driver_info(self, h: str) -> dict[str, str]:
        return {"driver_name": "amdgpu", "driver_version": "6.8.5"}

    def amdsmi_topo_get_numa_node_number(self, h: str) -> int:
        return 1

    def amdsmi_topo_get_link_type(self, a: str, b: str) -> dict[str, str]:
        return {"hops": "1", "type": "AMDSMI_LINK_TYPE_XGMI"}


def test_discovers_mi300x_with_xgmi_peers_and_na_as_none() -> None:
    devices = AmdSmiProbe(library=FakeAmdSmi()).discover()  # type: ignore[arg-type]
    first, second = devices
    assert first.canonical_model == "MI300X"
    assert (first.memory_total_mib, first.memory_used_mib, first.compute_units) == (
        196592,
        512,
        304,
    )
    assert first.peers == ("uuid-h1",) and first.link_group == "xgmi-0"
    assert first.utilization_pct == 37.0 and second.utilization_pct is None
    assert first.driver_version == "6.8.5" and first.numa_node == 1


def test_missing_vram_is_a_parse_error() -> None:
    class NoVram(FakeAmdSmi):
        def amdsmi_get_gpu_vram_usage(self, h: str) -> dict[str, int]:
            return {}

    with pytest.raises(ProbeError) as exc:
        AmdSmiProbe(library=NoVram()).discover()  # type: ignore[arg-type]
    assert exc.value.kind is ProbeFailure.PARSE


def test_uncorrectable_ecc_errors_mark_the_card_unhealthy() -> None:
    from xpupool.probes import Health

    class Ecc(FakeAmdSmi):
        def amdsmi_get_gpu_total_ecc_count(self, h: str) -> dict[str, int]:
            bad = 2 if h == "h1" else 0
            return {"correctable_count": 5, "uncorrectable_count": bad, "deferred_count": 0}

    first, second = AmdSmiProbe(library=Ecc()).discover()  # type: ignore[arg-type]
    assert first.health is Health.HEALTHY and first.health_detail == ""
    assert second.health is Health.UNHEALTHY
    assert second.health_detail == "ecc-uncorrectable: 2 uncorrectable ECC error(s) (amdsmi)"
    plain = AmdSmiProbe(library=FakeAmdSmi()).discover()  # type: ignore[arg-type]
    assert all(d.health is Health.HEALTHY for d in plain)  # no ECC call: as before


def test_process_memory_per_card_for_the_share_watch() -> None:
    class Procs(FakeAmdSmi):
        def amdsmi_get_gpu_process_list(self, h: str) -> list[object]:
            if h == "h1":
                return ["an older release's handle"]
            return [
                {"pid": 41, "mem": 9 << 30, "memory_usage": {"vram_mem": 8 << 30, "gtt_mem": 0}},
                {"pid": 42, "mem": 3 << 20},  # no split: the total counts
                {"pid": "N/A", "mem": 5},
            ]

    usage = AmdSmiProbe(library=Procs()).process_memory()  # type: ignore[arg-type]
    assert usage == {"uuid-h0": {41: 8192, 42: 3}, "uuid-h1": {}}
    none = AmdSmiProbe(library=FakeAmdSmi()).process_memory()  # type: ignore[arg-type]
    assert none == {"uuid-h0": {}, "uuid-h1": {}}  # a library without the call: nothing


class BadPages(FakeAmdSmi):
    """h1's bad pages as ``amdsmi_get_gpu_bad_page_info`` returns them (a dict per page, the C
    status enum passed through); h0 has none, which the binding says as a string."""

    def __init__(self, statuses: list[object]) -> None:
        self.statuses = statuses

    def amdsmi_get_gpu_bad_page_info(self, h: str) -> list[dict[str, object]] | str:
        if h == "h0":
            return "No bad pages found."
        return [
            {"value": i, "page_address": 0x7F000 + i * 4096, "page_size": 4096, "status": s}
            for i, s in enumerate(self.statuses)
        ]


@pytest.mark.parametrize(
    ("statuses", "healthy", "cause", "kind"),
    [
        ([0, 0], True, "", None),  # retired: the card serves on
        ([0, 1, 1], False, "page-retire-pending: 2 bad page(s) pending retirement (amdsmi)", None),
        ([2], False, "amdsmi bad pages: 1 unreservable", "other"),
        (["AMDSMI_MEM_PAGE_STATUS_PENDING"], False, None, "page-retire-pending"),
        ([7], False, "amdsmi bad pages: 1 7", "other"),  # a status no table names
    ],
)
def test_bad_pages_pending_or_unreservable_mark_the_card_unhealthy(
    statuses: list[object], healthy: bool, cause: str | None, kind: str | None
) -> None:
    from xpupool.probes import Health
    from xpupool.probes.health_causes import cause_key

    first, second = AmdSmiProbe(library=BadPages(statuses)).discover()  # type: ignore[arg-type]
    assert first.health is Health.HEALTHY and first.health_detail == ""
    assert (second.health is Health.HEALTHY) is healthy
    if cause is not None:
        assert second.health_detail == cause
    if kind is not None and not healthy:
        assert cause_key(second.health_detail) == kind


def test_each_cards_pci_address_is_kept_for_its_render_node() -> None:
    class Bdf(FakeAmdSmi):
        def amdsmi_get_gpu_device_bdf(self, h: str) -> str:
            return "0000:C1:00.0" if h == "h0" else "N/A"

    probe = AmdSmiProbe(library=Bdf())  # type: ignore[arg-type]
    probe.discover()
    assert probe.bus_ids == {"uuid-h0": "0000:c1:00.0"}  # "N/A" is no address
    old = AmdSmiProbe(library=FakeAmdSmi())  # type: ignore[arg-type]
    old.discover()
    assert old.bus_ids == {}  # a library without the call: the index rule
