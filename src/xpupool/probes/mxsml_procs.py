"""Per-process device memory of MetaX GPUs from MetaX's management library, ``libmxsml.so``.

``mx-smi``'s default table prints no process, and no public capture of a process listing of it
was found; the library's calls are public in MetaX's own extractor in nvtop (Syllo/nvtop
``src/extract_gpuinfo_metax.c``, "Copyright (c) 2025 MetaX Integrated Circuits ... adapted from
mxsml"): ``mxSmlInit``, ``mxSmlGetDeviceCount`` (the count as its return value),
``mxSmlGetNumberOfProcess`` (how many processes use any GPU) and ``mxSmlGetSingleGpuProcess``
(the processes on one device, each ``mxSmlProcessInfo_t``: its PID, name, and per GPU it uses
an ``mxSmlProcessGpuInfo_t`` with the GPU's PCI address ``bdfId`` and ``gpuMemoryUsage``). The
address names the card as the probe does (``metax-<bus id>``), so no index has to be trusted.
The unit of ``gpuMemoryUsage`` is not stated; nvtop uses it as bytes (it scales the device's
memory figures, which are KiB, and not this one), and it is read so: the smaller reading, so a
process is never charged more than it holds. Unverified on hardware.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable
from typing import Any

from xpupool.probes.base import ProbeError, ProbeFailure

VENDOR = "metax"
ENV_LIBRARY = "XPUPOOL_MXSML_LIB"
LIBRARIES = (
    "/opt/mxdriver/lib/libmxsml.so",
    "/opt/maca/lib/libmxsml.so",
    "/opt/mxn100/lib/libmxsml.so",
)
MIB = 1024 * 1024
SUCCESS = 0
_SPARE = 8  # room for processes that start between the count and the list


class ProcessGpuInfo(ctypes.Structure):
    """``mxSmlProcessGpuInfo_t``."""

    _fields_ = [
        ("bdf", ctypes.c_char * 32),
        ("gpu", ctypes.c_uint),
        ("used", ctypes.c_ulong),
    ]


class ProcessInfo(ctypes.Structure):
    """``mxSmlProcessInfo_t`` (``MAX_GPU_NUM_USED_BY_PROCESS`` is 64)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("name", ctypes.c_char * 64),
        ("gpus", ctypes.c_uint),
        ("per_gpu", ProcessGpuInfo * 64),
    ]


def read_processes(
    library: object | None = None, loader: Callable[[str], Any] = ctypes.CDLL
) -> dict[str, dict[int, int]]:
    """``{metax-<bus id>: {pid: MiB}}`` of every device; raises ProbeError when the library
    cannot be loaded or asked. ``library``: a fake in tests (the same function names, filling
    the pointers and arrays it is handed)."""
    lib: Any = library if library is not None else _load(loader)
    _check(lib, "mxSmlInit")
    count = int(lib.mxSmlGetDeviceCount())
    procs = ctypes.c_uint(0)
    _check(lib, "mxSmlGetNumberOfProcess", ctypes.pointer(procs))
    room = int(procs.value) + _SPARE
    out: dict[str, dict[int, int]] = {}
    for device in range(count):
        infos = (ProcessInfo * room)()
        listed = ctypes.c_uint(room)
        _check(
            lib, "mxSmlGetSingleGpuProcess", ctypes.c_uint(device), ctypes.pointer(listed), infos
        )
        for info in infos[: min(int(listed.value), room)]:
            for gpu in info.per_gpu[: min(int(info.gpus), 64)]:
                bus = gpu.bdf.decode("ascii", errors="replace").strip().lower()
                if bus:  # one process and card, listed again for another device: the same
                    out.setdefault(f"{VENDOR}-{bus}", {})[int(info.pid)] = int(gpu.used) // MIB
    return out


def _load(loader: Callable[[str], Any]) -> Any:
    override = os.environ.get(ENV_LIBRARY, "").strip()
    tried = []
    for path in (override,) if override else LIBRARIES:
        try:
            lib = loader(path)
        except OSError as exc:
            tried.append(f"{path}: {exc}")
            continue
        with contextlib.suppress(AttributeError):
            lib.mxSmlGetDeviceCount.restype = ctypes.c_uint
        return lib
    raise ProbeError(VENDOR, "load libmxsml.so", ProbeFailure.LIBRARY_MISSING, "; ".join(tried))


def _check(lib: Any, name: str, *args: object) -> None:
    try:
        function = getattr(lib, name)
    except AttributeError:
        raise ProbeError(
            VENDOR, name, ProbeFailure.LIBRARY_MISSING, "not exported by this libmxsml"
        ) from None
    code = int(function(*args))
    if code != SUCCESS:
        raise ProbeError(VENDOR, name, ProbeFailure.TOOL_FAILED, f"returned {code}")
