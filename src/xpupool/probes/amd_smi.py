"""AMD Instinct GPUs through the ``amdsmi`` Python library (imported lazily).

The library's dictionaries changed keys between ROCm releases; every optional read goes through
``_optional`` and yields None (with the reason in ``skipped``) rather than failing the probe.
Note for operators: ``amdsmi`` reports the kernel driver's own version, not the ROCm release the
compatibility table is keyed by; ``runtimes["rocm"]`` is set only when the library says it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, ClassVar

from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure, canonical


class AmdSmiProbe:
    vendor: ClassVar[str] = "amd"

    def __init__(self, library: ModuleType | None = None) -> None:
        self._library = library
        self.skipped: list[str] = []

    def _amdsmi(self) -> Any:
        if self._library is None:
            try:
                self._library = importlib.import_module("amdsmi")
            except ImportError as exc:
                raise ProbeError(
                    self.vendor,
                    "import amdsmi",
                    ProbeFailure.LIBRARY_MISSING,
                    f"{exc}; install ROCm's amdsmi package",
                ) from None
        return self._library

    def available(self) -> bool:
        try:
            lib = self._amdsmi()
            lib.amdsmi_init()
            lib.amdsmi_shut_down()
        except Exception:
            return False
        return True

    def discover(self) -> list[DeviceInfo]:
        lib = self._amdsmi()
        try:
            lib.amdsmi_init()
        except Exception as exc:
            raise ProbeError(
                self.vendor, "amdsmi_init", ProbeFailure.TOOL_FAILED, str(exc)
            ) from None
        try:
            self.skipped = []
            handles = list(lib.amdsmi_get_processor_handles())
            return [self._device(lib, i, h, handles) for i, h in enumerate(handles)]
        finally:
            try:
                lib.amdsmi_shut_down()
            except Exception:
                self.skipped.append("amdsmi_shut_down failed")

    def _device(self, lib: Any, index: int, h: object, handles: list[object]) -> DeviceInfo:
        asic = self._optional(lambda: lib.amdsmi_get_gpu_asic_info(h), "asic info") or {}
        model = str(asic.get("market_name") or "AMD GPU")
        uuid = str(
            self._optional(lambda: lib.amdsmi_get_gpu_device_uuid(h), "uuid") or f"amd-{index}"
        )
        vram = self._optional(lambda: lib.amdsmi_get_gpu_vram_usage(h), "vram") or {}
        activity = self._optional(lambda: lib.amdsmi_get_gpu_activity(h), "activity") or {}
        power = self._optional(lambda: lib.amdsmi_get_power_info(h), "power") or {}
        driver = self._optional(lambda: lib.amdsmi_get_gpu_driver_info(h), "driver") or {}
        numa = self._optional(lambda: lib.amdsmi_topo_get_numa_node_number(h), "numa")
        watts = power.get("current_socket_power", power.get("average_socket_power"))
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
            health=Health.HEALTHY,
        )

    def _is_xgmi(self, lib: Any, a: object, b: object) -> bool:
        link = self._optional(lambda: lib.amdsmi_topo_get_link_type(a, b), "link type") or {}
        return "XGMI" in str(link.get("type", "")).upper()

    def _optional(self, read: Any, what: str) -> Any:
        try:
            return read()
        except Exception as exc:
            self.skipped.append(f"{what}: {exc}")
            return None


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None  # "N/A" and friends
