"""Enflame GCUs through EFML, Enflame's management library (``libefml.so``), loaded with ctypes.

Why the library and not ``efsmi``: no public description of efsmi's text output was found, while
EFML's C header (``efml.h``) and the Go binding Enflame's own gcu-exporter uses are public (see
``tests/fixtures/probes/SOURCES-efml.md``). The probe uses the ``Efml*`` calls that both the 2019
and the 2024-2025 headers declare and that gcu-exporter calls, each taking a device index:

* identity: ``EfmlGetDevSKU`` (the model, "S60"; gcu-exporter labels cards "Enflame <SKU>"), else
  ``EfmlGetDevName``; ``EfmlGetDevUuid`` (reported as ``GCU-<uuid>``, gcu-exporter's form);
  ``EfmlGetDevInfo`` for the PCI address; ``EfmlGetDriverVer``;
* capacity: ``EfmlGetDevMem``: total in *bytes* (uint64) but used in *MiB* (uint32), as
  gcu-exporter converts them;
* metrics: ``EfmlGetDevDtuUsage`` (percent), ``EfmlGetDevPwr`` (watts, float),
  ``EfmlGetDevTempV2`` on GCU300 parts else ``EfmlGetDevTemp`` (degrees C, float), as
  gcu-exporter chooses; ``EfmlGetNumaNode`` where the library has it (2024 and later);
* health: ``EfmlGetDevHealth`` (true read as healthy: inferred from the name, unconfirmed);
* per-process memory (the agent's watch on shares): the same library's lower-case ``efml*`` API,
  ``efmlDeviceGetComputeRunningProcesses`` (``probes/nvml_shaped.py``: its source is Enflame's
  extractor in nvtop), one list per device index, charged to the card listed at that index.
  That its index is the ``Efml*`` one, and ``/dev/gcu<index>`` the card's node, is unverified
  on hardware: the rows go through the agent's device-node check (``prints_names``).

Every call returns an ``efmlReturn_t`` code. A failed init, device count or memory read fails the
probe with the call, the code and its name (a ProbeError, never a raw exception); a metric the
library refuses is None with the reason in ``skipped``. ``available()`` only loads the library, so
a host with the library but no working driver is reported as a failure with its reason rather than
skipped silently. The library path is ``$XPUPOOL_EFML_LIB`` when set, else the names gcu-exporter
tries. ``index`` is EFML's device index; whether it is the order ``TOPS_VISIBLE_DEVICES`` uses is
unverified.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from xpupool.probes.base import (
    DeviceInfo,
    DeviceNodes,
    Health,
    ProbeError,
    ProbeFailure,
    canonical,
)
from xpupool.probes.nvml_shaped import EFML_NEXT, CompatProcesses, by_uuid

VENDOR = "enflame"
ENV_LIBRARY = "XPUPOOL_EFML_LIB"
# The names gcu-exporter's loader tries; ``libefml-arm.so`` is what Enflame's docs name on ARM.
DEFAULT_LIBRARIES: tuple[str, ...] = (
    "libefml.so",
    "libefml.so.1.0.0",
    "/usr/lib/libefml.so",
    "libefml-arm.so",
)
MIB = 1024 * 1024
_BUFFER = 256  # the header's MAX_CHAR_BUFF_LEN is 128: twice that, so an overrun cannot happen
_GCU300 = 2  # efmlHwArch_t: GCU200 = 0, GCU210 = 1, GCU300 = 2

EFML_SUCCESS = 0
EFML_ERROR_NOT_SUPPORTED = 3
EFML_ERROR_LIBRARY_NOT_FOUND = 4
# efmlReturn_t of the Efml* calls (names as in the 2024-2025 header; 5 and 7 had other names in
# 2019). The lower-case efml* "next" API has its own, different codes; it is not used here.
ERROR_NAMES: dict[int, str] = {
    0: "EFML_SUCCESS",
    1: "EFML_ERROR_UNINITIALIZED",
    2: "EFML_ERROR_INVALID_ARGUMENT",
    3: "EFML_ERROR_NOT_SUPPORTED",
    4: "EFML_ERROR_LIBRARY_NOT_FOUND",
    5: "EFML_ERROR_INVALID_ERROR_CODE",
    6: "EFML_ERROR_DRIVER_NOT_LOADED",
    7: "EFML_ERROR_GCU_LARE_PORT_NUMBER_ERR",
    8: "EFML_ERROR_INVALID_INPUT",
    9: "EFML_ERROR_FUNCTION_NOT_FOUND",
    10: "EFML_ERROR_OPEN_DRIVER_VERSION",
    11: "EFML_ERROR_DRIVER_NOT_COMPATIBLE",
    12: "EFML_ERROR_NO_DEVICE",
    13: "EFML_ERROR_DEPRECATION",
    253: "EFML_ERROR_TIMEOUT",
    254: "EFML_ERROR_FAIL",
    255: "EFML_ERROR_MAX",
}


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"unknown EFML code {code}")


# ---------------------------------------------------------------- C structures (efml.h)
class DevMemInfo(ctypes.Structure):
    """``efmlDevMemInfo_t``: total in bytes, used in MiB."""

    _fields_ = [("mem_total_size", ctypes.c_uint64), ("mem_used", ctypes.c_uint32)]


class DevPowerInfo(ctypes.Structure):
    """``efmlDevPowerInfo_t``: board power limit and current draw, watts."""

    _fields_ = [("pwr_capability", ctypes.c_float), ("cur_pwr_consumption", ctypes.c_float)]


class DevThermalInfo(ctypes.Structure):
    """``efmlDevThermalInfo_t`` (GCU200/210 parts)."""

    _fields_ = [
        ("cur_dev_temp", ctypes.c_float),
        ("cur_hbm0_temp", ctypes.c_float),
        ("cur_hbm1_temp", ctypes.c_float),
    ]


class DevThermalInfoV2(ctypes.Structure):
    """``efmlDevThermalInfoV2_t`` (GCU300 parts)."""

    _fields_ = [
        ("cur_asic_temp", ctypes.c_float),
        ("cur_mem_temp", ctypes.c_float),
        ("cur_board_temp", ctypes.c_float),
    ]


class DevPciInfo(ctypes.Structure):
    """``efmlDeviceInfo_t``: a name and the PCI vendor/device ids and address."""

    _fields_ = [
        ("name", ctypes.c_char * 128),
        ("vendor_id", ctypes.c_uint32),
        ("device_id", ctypes.c_uint32),
        ("domain_id", ctypes.c_uint32),
        ("bus_id", ctypes.c_uint32),
        ("dev_id", ctypes.c_uint32),
        ("func_id", ctypes.c_uint32),
        ("logic_id", ctypes.c_uint32),
    ]


_Out = TypeVar("_Out", bound="ctypes._CData")
_U32P = ctypes.POINTER(ctypes.c_uint32)
_IDX = ctypes.c_uint32
# Prototypes set on the real library so ctypes converts arguments as the header declares them.
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "EfmlInit": (ctypes.c_int, [ctypes.c_bool]),
    "EfmlShutdown": (None, []),
    "EfmlErrorString": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
    "EfmlGetDriverVer": (ctypes.c_int, [ctypes.c_char_p]),
    "EfmlGetDevCount": (ctypes.c_int, [_U32P]),
    "EfmlGetDevSKU": (ctypes.c_int, [_IDX, ctypes.c_char_p]),
    "EfmlGetDevName": (ctypes.c_int, [_IDX, ctypes.c_char_p]),
    "EfmlGetDevUuid": (ctypes.c_int, [_IDX, ctypes.c_char_p]),
    "EfmlGetDevInfo": (ctypes.c_int, [_IDX, ctypes.POINTER(DevPciInfo)]),
    "EfmlGetDevMem": (ctypes.c_int, [_IDX, ctypes.POINTER(DevMemInfo)]),
    "EfmlGetDevDtuUsage": (ctypes.c_int, [_IDX, ctypes.POINTER(ctypes.c_float)]),
    "EfmlGetDevPwr": (ctypes.c_int, [_IDX, ctypes.POINTER(DevPowerInfo)]),
    "EfmlGetDevTemp": (ctypes.c_int, [_IDX, ctypes.POINTER(DevThermalInfo)]),
    "EfmlGetDevTempV2": (ctypes.c_int, [_IDX, ctypes.POINTER(DevThermalInfoV2)]),
    "EfmlGetHwArch": (ctypes.c_int, [_IDX, ctypes.POINTER(ctypes.c_int)]),
    "EfmlGetDevHealth": (ctypes.c_int, [_IDX, ctypes.POINTER(ctypes.c_bool)]),
    "EfmlGetNumaNode": (ctypes.c_int, [_IDX, ctypes.POINTER(ctypes.c_int)]),
}


def declare_prototypes(lib: Any) -> None:
    """Set restype/argtypes for every known call the library exports (absent ones are skipped)."""
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            continue  # older or newer library without this call: reported when it is used
        function.restype = restype
        function.argtypes = argtypes


class EfmlError(Exception):
    """An ``Efml*`` call returned a code other than EFML_SUCCESS, or the library lacks the call."""

    def __init__(self, call: str, code: int | None, message: str = "") -> None:
        self.call = call
        self.code = code
        self.message = message
        if code is None:
            text = f"{call}: not exported by this libefml"
        else:
            text = f"{call} returned {code} ({error_name(code)})"
            if message and message != error_name(code):
                text += f": {message}"
        super().__init__(text)


class Efml:
    """Thin Python face of the C calls: output arguments become return values, codes errors.

    ``lib`` is a ``ctypes.CDLL`` or, in tests, any object with the same function names that fills
    the ctypes pointers and buffers it is handed.
    """

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def has(self, name: str) -> bool:
        try:
            getattr(self.lib, name)
        except AttributeError:
            return False
        return True

    def call(self, name: str, *args: object) -> None:
        try:
            function = getattr(self.lib, name)
        except AttributeError:
            raise EfmlError(name, None) from None
        code = int(function(*args))
        if code != EFML_SUCCESS:
            raise EfmlError(name, code, self.describe(code))

    def describe(self, code: int) -> str:
        """The library's own text for ``code`` (``EfmlErrorString``), or "" when it has none."""
        buffer = ctypes.create_string_buffer(_BUFFER)
        try:
            if int(self.lib.EfmlErrorString(code, buffer)) != EFML_SUCCESS:
                return ""
        except Exception:  # no such call, or it misbehaves: the code and its name still say it
            return ""
        return _text(buffer.value)

    def text(self, name: str, *args: object) -> str:
        buffer = ctypes.create_string_buffer(_BUFFER)
        self.call(name, *args, buffer)
        return _text(buffer.value)

    def fill(self, name: str, index: int, out: _Out) -> _Out:
        """``name(index, &out)``; returns ``out`` filled in."""
        self.call(name, index, ctypes.pointer(out))
        return out

    # -------------------------------------------------------------- the calls the probe uses
    def init(self) -> None:
        self.call("EfmlInit", False)  # no_driver=False: talk to the kernel driver

    def shutdown(self) -> None:
        self.lib.EfmlShutdown()

    def driver_version(self) -> str:
        return self.text("EfmlGetDriverVer")

    def count(self) -> int:
        count = ctypes.c_uint32(0)
        self.call("EfmlGetDevCount", ctypes.pointer(count))
        return int(count.value)

    def memory(self, index: int) -> DevMemInfo:
        return self.fill("EfmlGetDevMem", index, DevMemInfo())

    def usage(self, index: int) -> float:
        return float(self.fill("EfmlGetDevDtuUsage", index, ctypes.c_float()).value)

    def power(self, index: int) -> DevPowerInfo:
        return self.fill("EfmlGetDevPwr", index, DevPowerInfo())

    def temperature(self, index: int) -> float:
        """GCU300 parts answer ``EfmlGetDevTempV2``, older ones ``EfmlGetDevTemp``, as
        gcu-exporter chooses; a library without the arch call uses whichever call it has."""
        v2 = self.has("EfmlGetDevTempV2")
        if v2 and self.has("EfmlGetHwArch") and self.has("EfmlGetDevTemp"):
            arch = self.fill("EfmlGetHwArch", index, ctypes.c_int(-1)).value
            v2 = arch == _GCU300
        if v2:
            return float(self.fill("EfmlGetDevTempV2", index, DevThermalInfoV2()).cur_asic_temp)
        return float(self.fill("EfmlGetDevTemp", index, DevThermalInfo()).cur_dev_temp)

    def healthy(self, index: int) -> bool:
        return bool(self.fill("EfmlGetDevHealth", index, ctypes.c_bool()).value)

    def bus_id(self, index: int) -> str:
        info = self.fill("EfmlGetDevInfo", index, DevPciInfo())
        return f"{info.domain_id:04x}:{info.bus_id:02x}:{info.dev_id:02x}.{info.func_id:x}"

    def numa_node(self, index: int) -> int:
        return int(self.fill("EfmlGetNumaNode", index, ctypes.c_int(-1)).value)


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace").strip()


def library_candidates() -> tuple[str, ...]:
    override = os.environ.get(ENV_LIBRARY, "").strip()
    return (override,) if override else DEFAULT_LIBRARIES


def _init_failure(exc: EfmlError) -> ProbeFailure:
    if exc.code is None or exc.code == EFML_ERROR_LIBRARY_NOT_FOUND:
        return ProbeFailure.LIBRARY_MISSING
    if "permission" in exc.message.lower():
        return ProbeFailure.PERMISSION
    return ProbeFailure.TOOL_FAILED


class EnflameEfmlProbe:
    """Enflame GCUs through EFML; ``library`` (a fake in tests) replaces loading libefml.so."""

    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # not names: an unverified index, proven by the node check

    def __init__(
        self,
        library: object | None = None,
        loader: Callable[[str], Any] = ctypes.CDLL,
        candidates: Sequence[str] | None = None,
    ) -> None:
        self._library = library
        self._loader = loader
        self._candidates = tuple(candidates) if candidates is not None else None
        self.skipped: list[str] = []
        self.bus_ids: dict[str, str] = {}  # uuid -> PCI address (DeviceInfo has no field for it)
        self.uuids: dict[int, str] = {}  # index -> uuid, as the last discover() listed them

    def library(self) -> Any:
        """The loaded library; ProbeError (library missing, permission) naming every path tried."""
        if self._library is not None:
            return self._library
        tried: list[str] = []
        denied = False
        for path in self._candidates or library_candidates():
            try:
                lib = self._loader(path)
            except OSError as exc:
                tried.append(f"{path}: {exc}")
                denied = denied or isinstance(exc, PermissionError) or "ermission" in str(exc)
                continue
            declare_prototypes(lib)
            self._library = lib
            return lib
        kind = ProbeFailure.PERMISSION if denied else ProbeFailure.LIBRARY_MISSING
        hint = f"install Enflame's driver package (efsmi ships libefml.so) or set {ENV_LIBRARY}"
        raise ProbeError(VENDOR, "load libefml.so", kind, "; ".join(tried) + f"; {hint}")

    def available(self) -> bool:
        """Is libefml.so loadable here? Init is left to discover(), so its failures get reported."""
        try:
            self.library()
        except ProbeError:
            return False
        return True

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: library missing, permission, or EfmlInit/count/memory call failed."""
        efml = Efml(self.library())
        self.skipped = []
        self.bus_ids = {}
        try:
            efml.init()
        except EfmlError as exc:
            raise ProbeError(VENDOR, exc.call, _init_failure(exc), str(exc)) from None
        try:
            driver = self._optional(efml.driver_version, "driver version")
            count = self._required(efml.count, None)
            devices = [self._device(efml, index, driver) for index in range(count)]
            self.uuids = {d.index: d.uuid for d in devices}
            return devices
        finally:
            try:
                efml.shutdown()
            except Exception as exc:
                self.skipped.append(f"EfmlShutdown: {exc}")

    def process_memory(self) -> dict[str, dict[int, int]]:
        """``{uuid: {pid: MiB}}`` through the ``efml*`` API (module docstring); raises
        ProbeError."""
        return by_uuid(CompatProcesses(EFML_NEXT, self.library()).read(), self.uuids)

    # ------------------------------------------------------------------ internals
    def _required(self, read: Callable[[], Any], index: int | None) -> Any:
        try:
            return read()
        except EfmlError as exc:
            where = f"device {index}: " if index is not None else ""
            raise ProbeError(VENDOR, exc.call, ProbeFailure.TOOL_FAILED, where + str(exc)) from None

    def _optional(self, read: Callable[[], Any], what: str) -> Any:
        """``read()``, or None when the library refuses (the reason goes to ``skipped``)."""
        try:
            return read()
        except EfmlError as exc:
            self.skipped.append(f"{what}: {exc}")
            return None

    def _device(self, efml: Efml, index: int, driver: str | None) -> DeviceInfo:
        bus = self._optional(lambda: efml.bus_id(index), f"device {index} PCI address")
        raw_uuid = self._optional(
            lambda: efml.text("EfmlGetDevUuid", index), f"device {index} uuid"
        )
        if raw_uuid:
            uuid = raw_uuid if raw_uuid.upper().startswith("GCU-") else f"GCU-{raw_uuid}"
        elif bus:
            uuid = f"enflame-pci-{bus}"  # stable while the card stays in its slot
        else:
            uuid = f"enflame-{index}"  # stable only while the enumeration order is
        if bus:
            self.bus_ids[uuid] = bus
        model = (
            self._optional(lambda: efml.text("EfmlGetDevSKU", index), f"{uuid} SKU")
            or self._optional(lambda: efml.text("EfmlGetDevName", index), f"{uuid} name")
            or "Enflame GCU"
        )
        memory = self._required(lambda: efml.memory(index), index)
        usage = self._optional(lambda: efml.usage(index), f"{uuid} util")
        power = self._optional(lambda: efml.power(index), f"{uuid} power")
        temperature = self._optional(lambda: efml.temperature(index), f"{uuid} temp")
        numa = (
            self._optional(lambda: efml.numa_node(index), f"{uuid} NUMA node")
            if efml.has("EfmlGetNumaNode")
            else None
        )
        healthy = self._optional(lambda: efml.healthy(index), f"{uuid} health")
        if healthy is None:
            health, detail = Health.UNKNOWN, "EfmlGetDevHealth gave no answer"
        elif healthy:
            health, detail = Health.HEALTHY, ""
        else:
            health, detail = Health.UNHEALTHY, "EfmlGetDevHealth reports the GCU unhealthy"
        return DeviceInfo(
            vendor=VENDOR,
            model=model,
            canonical_model=canonical(model, VENDOR),
            uuid=uuid,
            index=index,
            memory_total_mib=int(memory.mem_total_size) // MIB,  # bytes
            memory_used_mib=int(memory.mem_used),  # already MiB
            utilization_pct=usage,
            power_watts=float(power.cur_pwr_consumption) if power is not None else None,
            temperature_c=temperature,
            driver_version=driver or None,
            numa_node=numa if numa is not None and numa >= 0 else None,
            health=health,
            health_detail=detail,
        )


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Enflame GCU: ``/dev/gcu<N>`` per card (Enflame's device plugin reports ``Path:
    "/dev/gcu0"`` for card 0; the codec's nodes ``gcu<N>vid<M>`` are not needed for compute).
    """
    return DeviceNodes(required=tuple(f"gcu{i}" for i in indices))
