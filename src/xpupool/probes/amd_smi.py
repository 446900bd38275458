"""AMD Instinct GPUs through the ``amdsmi`` Python library (imported lazily).

The library's dictionaries changed keys between ROCm releases; every optional read goes through
``_optional`` and yields None (with the reason in ``skipped``) rather than failing the probe.
Note for operators: ``amdsmi`` reports the kernel driver's own version, not the ROCm release the
compatibility table is keyed by; ``runtimes["rocm"]`` is set only when the library says it.
Health: uncorrectable ECC errors from ``amdsmi_get_gpu_total_ecc_count`` (its ``correctable_count``,
``uncorrectable_count`` and ``deferred_count``: AMD SMI's Python API reference) make a card
unhealthy; a library without the call, or a card without ECC, leaves it healthy as before.
Bad pages from ``amdsmi_get_gpu_bad_page_info`` (one dict per page with ``status``, the C enum
``amdsmi_memory_page_status_t``: 0 reserved, 1 pending, 2 unreservable; the Python binding passes
the number through, and says "No bad pages found." as a string where there are none): a page
pending retirement makes the card unhealthy (``page-retire-pending``, as NVML's pending
retirement does), one that cannot be retired too (kind ``other``); retired pages leave it healthy.
Each card's PCI address (``amdsmi_get_gpu_device_bdf``, a ``0000:c1:00.0`` string in AMD SMI's
Python API) is kept in ``bus_ids``, so that the agent finds its render node by address
(``agent/card_holders.py``) rather than by the index rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

from xpupool.probes.base import (
    DeviceInfo,
    DeviceNodes,
    Health,
    ProbeError,
    ProbeFailure,
    canonical,
    render_node,
)
from xpupool.probes.library import LibraryProbe

MIB = 1 << 20
_BDF = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


class AmdSmiProbe(LibraryProbe):
    vendor: ClassVar[str] = "amd"
    module_name: ClassVar[str] = "amdsmi"
    install_hint: ClassVar[str] = "install ROCm's amdsmi package"
    init_name: ClassVar[str] = "amdsmi_init"
    shutdown_name: ClassVar[str] = "amdsmi_shut_down"

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per device UUID: ``{uuid: {pid: mib}}``,
        for the agent's watch on shares (agent/share_watch.py), as NVML's is.

        ``amdsmi_get_gpu_process_list(handle)`` returns one dict per process in the Python API
        (AMD SMI's Python API reference: ``pid``, ``mem`` in bytes and ``memory_usage`` with
        ``vram_mem``); VRAM is what a share grants, so ``vram_mem`` counts, else ``mem``. Older
        releases returned process handles instead of dicts: those, and entries without a figure,
        are left out, as a process NVML reports without one is.
        """
        with self.session() as lib:
            usage: dict[str, dict[int, int]] = {}
            for index, h in enumerate(lib.amdsmi_get_processor_handles()):
                got = self.optional(partial(lib.amdsmi_get_gpu_device_uuid, h), "uuid")
                uuid = str(got or f"amd-{index}")
                listing = getattr(lib, "amdsmi_get_gpu_process_list", None)
                procs = self.optional(partial(listing, h), f"{uuid} processes") if listing else ()
                per_pid: dict[int, int] = {}
                for proc in procs or ():
                    if not isinstance(proc, dict):
                        continue
                    pid = proc.get("pid")
                    split = proc.get("memory_usage")
                    used = split.get("vram_mem") if isinstance(split, dict) else None
                    used = used if isinstance(used, int) else proc.get("mem")
                    if isinstance(pid, int) and isinstance(used, int) and used >= 0:
                        per_pid[pid] = per_pid.get(pid, 0) + used // MIB
                usage[uuid] = per_pid
            return usage

    def read_devices(self, lib: Any) -> list[DeviceInfo]:
        handles = list(lib.amdsmi_get_processor_handles())
        self.bus_ids: dict[str, str] = {}  # uuid -> PCI address: the card's render node
        return [self._device(lib, i, h, handles) for i, h in enumerate(handles)]

    def _device(self, lib: Any, index: int, h: object, handles: list[object]) -> DeviceInfo:
        asic = self.optional(lambda: lib.amdsmi_get_gpu_asic_info(h), "asic info") or {}
        model = str(asic.get("market_name") or "AMD GPU")
        uuid = str(
            self.optional(lambda: lib.amdsmi_get_gpu_device_uuid(h), "uuid") or f"amd-{index}"
        )
        bdf = self.optional(lambda: lib.amdsmi_get_gpu_device_bdf(h), f"{uuid} bdf")
        found = _BDF.fullmatch(str(bdf).strip()) if bdf else None
        if found is not None:  # "0000:c1:00.0", AMD SMI's Python API
            self.bus_ids[uuid] = found.group(0).lower()
        vram = self.optional(lambda: lib.amdsmi_get_gpu_vram_usage(h), "vram") or {}
        activity = self.optional(lambda: lib.amdsmi_get_gpu_activity(h), "activity") or {}
        power = self.optional(lambda: lib.amdsmi_get_power_info(h), "power") or {}
        driver = self.optional(lambda: lib.amdsmi_get_gpu_driver_info(h), "driver") or {}
        numa = self.optional(lambda: lib.amdsmi_topo_get_numa_node_number(h), "numa")
        watts = power.get("current_socket_power", power.get("average_socket_power"))
        ecc = self.optional(lambda: lib.amdsmi_get_gpu_total_ecc_count(h), f"{uuid} ECC") or {}
        bad = _number(ecc.get("uncorrectable_count"))
        health, detail = Health.HEALTHY, ""
        if bad:
            health = Health.UNHEALTHY
            detail = f"ecc-uncorrectable: {int(bad)} uncorrectable ECC error(s) (amdsmi)"
        else:
            pages = self.optional(lambda: lib.amdsmi_get_gpu_bad_page_info(h), f"{uuid} bad pages")
            health, detail = _bad_page_health(pages)
        if "vram_total" not in vram:
            raise ProbeError(
                self.vendor,
                "amdsmi_get_gpu_vram_usage",
                ProbeFailure.PARSE,
                f"no vram_total for {uuid}",
            )
        peers = tuple(
            sorted(
                str(lib.amdsmi_get_gpu_device_uuid(other))
                for other in handles
                if other is not h and self._is_xgmi(lib, h, other)
            )
        )
        return DeviceInfo(
            vendor=self.vendor,
            model=model,
            canonical_model=canonical(model, self.vendor),
            uuid=uuid,
            index=index,
            memory_total_mib=int(vram["vram_total"]),
            memory_used_mib=int(vram["vram_used"]) if "vram_used" in vram else None,
            compute_units=asic.get("num_of_compute_units"),
            utilization_pct=_number(activity.get("gfx_activity")),
            power_watts=_number(watts),
            driver_version=str(driver["driver_version"]) if driver.get("driver_version") else None,
            numa_node=int(numa) if isinstance(numa, int) and numa >= 0 else None,
            link_group="xgmi-0" if peers else None,
            peers=peers,
            health=health,
            health_detail=detail,
        )

    def _is_xgmi(self, lib: Any, a: object, b: object) -> bool:
        link = self.optional(lambda: lib.amdsmi_topo_get_link_type(a, b), "link type") or {}
        return "XGMI" in str(link.get("type", "")).upper()


_PAGE_STATUS = {0: "RESERVED", 1: "PENDING", 2: "UNRESERVABLE"}  # amdsmi_memory_page_status_t


def _bad_page_health(pages: object) -> tuple[Health, str]:
    """Health from ``amdsmi_get_gpu_bad_page_info``'s records (module docstring); anything but a
    list of records (the "none found" string, no such call) is a card without bad pages."""
    counts: dict[str, int] = {}
    for page in pages if isinstance(pages, list) else ():
        raw = page.get("status") if isinstance(page, dict) else None
        status = _PAGE_STATUS.get(raw, str(raw)) if isinstance(raw, int) else str(raw).upper()
        status = status.removeprefix("AMDSMI_MEM_PAGE_STATUS_")
        counts[status] = counts.get(status, 0) + 1
    if counts.get("PENDING"):
        return Health.UNHEALTHY, (
            f"page-retire-pending: {counts['PENDING']} bad page(s) pending retirement (amdsmi)"
        )
    odd = {k: n for k, n in counts.items() if k != "RESERVED"}
    if odd:
        said = ", ".join(f"{n} {k.lower()}" for k, n in sorted(odd.items()))
        return Health.UNHEALTHY, f"amdsmi bad pages: {said}"  # kind other
    return Health.HEALTHY, ""


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None  # "N/A" and friends


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """AMD: ``/dev/kfd`` ("the main compute interface shared by all GPUs") and each card's
    ``/dev/dri/renderD<128+i>``; ROCm's own guide for restricting a container to some GPUs passes
    exactly these (rocm.docs.amd.com, "Running ROCm Docker containers", Restricting GPU access).
    """
    return DeviceNodes(required=("kfd", *(render_node(i) for i in indices)))
