"""Per-process device memory from the vendor libraries that copy NVML's C API, loaded with ctypes.

Two vendors ship one: Iluvatar CoreX's ``libixml.so`` exports NVML's own names (``nvmlInit_v2``,
``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetComputeRunningProcesses`` filling
``nvmlProcessInfo_t``: pid, ``usedGpuMemory`` in bytes, GPU and compute instance ids), and
Enflame's ``libefml.so`` carries, beside the ``Efml*`` calls its probe reads
(``probes/enflame_efml.py``), an ``efml*`` API of the same shape
(``efmlDeviceGetComputeRunningProcesses_v3``/``_v2``/unversioned, ``efmlProcessInfo_v*_t``:
pid, ``usedGcuMemory`` in bytes, and, from v2, the instance ids). Source for both: the
vendors' own extractors in nvtop (Syllo/nvtop ``src/extract_gpuinfo_ixml.c``, and
``src/extract_gcuinfo_enflame.c``, "Copyright (c) 2025 Enflame Technology ... adapted from
efml"), which load these libraries and call these functions; no manual of either library was
found. Unverified on hardware: the layouts are as nvtop declares them, and the library's device
index is taken to be the order the vendor's probe numbers its cards in.

A list is read as NVML documents it: asked first with room for none (success: no process;
``INSUFFICIENT_SIZE``, 7 in both libraries, with the number needed), then with room for that
many and a few more (processes may start between the calls). A figure the library marks as not
available (all ones, NVML's ``NVML_VALUE_NOT_AVAILABLE``) is left out. Bytes are floored to MiB:
a process is never charged more than it holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xpupool.probes.base import ProbeError, ProbeFailure

MIB = 1024 * 1024
SUCCESS = 0
INSUFFICIENT_SIZE = 7
NOT_AVAILABLE = 2**64 - 1
_SPARE = 8  # room for processes that start between the two calls


class ProcessInfoV1(ctypes.Structure):
    """``efmlProcessInfo_v1_t``: pid and memory in bytes."""

    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    """``nvmlProcessInfo_t`` as libixml fills it, ``efmlProcessInfo_v2_t``/``_v3_t``."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("used", ctypes.c_ulonglong),
        ("instance", ctypes.c_uint),
        ("compute_instance", ctypes.c_uint),
    ]


@dataclass(frozen=True, slots=True)
class Dialect:
    """One library's names: what to load and which calls to make, newest name first."""

    vendor: str
    env: str  # the variable naming the library's path, when set
    libraries: tuple[str, ...]
    init: tuple[str, ...]
    shutdown: str
    count: tuple[str, ...]
    handle: tuple[str, ...]
    processes: tuple[tuple[str, type[ctypes.Structure]], ...]


IXML = Dialect(
    vendor="iluvatar",
    env="XPUPOOL_IXML_LIB",
    libraries=(
        "/usr/local/corex/lib/libixml.so",
        "/usr/local/corex/lib64/libixml.so",
        "libixml.so",
    ),
    init=("nvmlInit_v2", "nvmlInit"),
    shutdown="nvmlShutdown",
    count=("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"),
    handle=("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
    processes=(("nvmlDeviceGetComputeRunningProcesses", ProcessInfoV2),),
)

EFML_NEXT = Dialect(
    vendor="enflame",
    env="XPUPOOL_EFML_LIB",
    libraries=("libefml.so", "libefml.so.1"),
    init=("efmlInit_v2", "efmlInit"),
    shutdown="efmlShutdown",
    count=("efmlDeviceGetCount_v2", "efmlDeviceGetCount"),
    handle=("efmlDeviceGetHandleByIndex_v2", "efmlDeviceGetHandleByIndex"),
    processes=(
        ("efmlDeviceGetComputeRunningProcesses_v3", ProcessInfoV2),
        ("efmlDeviceGetComputeRunningProcesses_v2", ProcessInfoV2),
        ("efmlDeviceGetComputeRunningProcesses", ProcessInfoV1),
    ),
)


class CompatProcesses:
    """Reads ``{device index: {pid: MiB}}`` through ``dialect``'s library; ``library`` (a fake in
    tests: any object with the same function names that fills the ctypes pointers and arrays it
    is handed) replaces loading it."""

    def __init__(
        self,
        dialect: Dialect,
        library: object | None = None,
        loader: Callable[[str], Any] = ctypes.CDLL,
    ) -> None:
        self.dialect = dialect
        self._library = library
        self._loader = loader

    def library(self) -> Any:
        """The loaded library; ProbeError naming every path tried when none loads."""
        if self._library is not None:
            return self._library
        override = os.environ.get(self.dialect.env, "").strip()
        tried = []
        for path in (override,) if override else self.dialect.libraries:
            try:
                self._library = self._loader(path)
                return self._library
            except OSError as exc:
                tried.append(f"{path}: {exc}")
        raise ProbeError(
            self.dialect.vendor,
            "load " + " or ".join(self.dialect.libraries),
            ProbeFailure.LIBRARY_MISSING,
            "; ".join(tried),
        )

    def read(self) -> dict[int, dict[int, int]]:
        """Each device's processes and their memory, MiB; raises ProbeError when the library
        cannot be loaded, started or asked."""
        lib = self.library()
        self._call(lib, self.dialect.init)
        try:
            count = ctypes.c_uint(0)
            self._call(lib, self.dialect.count, ctypes.pointer(count))
            out: dict[int, dict[int, int]] = {}
            for index in range(int(count.value)):
                handle = ctypes.c_void_p()
                self._call(lib, self.dialect.handle, ctypes.c_uint(index), ctypes.pointer(handle))
                out[index] = self._processes(lib, handle)
            return out
        finally:
            # the figures were read; a failed shutdown changes none of them
            with contextlib.suppress(Exception):
                getattr(lib, self.dialect.shutdown)()

    def _processes(self, lib: Any, handle: ctypes.c_void_p) -> dict[int, int]:
        name, struct = self._first(lib, self.dialect.processes)
        function = getattr(lib, name)
        count = ctypes.c_uint(0)
        code = int(function(handle, ctypes.pointer(count), None))
        if code == SUCCESS:
            return {}
        if code != INSUFFICIENT_SIZE:
            raise self._error(name, code)
        room = int(count.value) + _SPARE
        infos = (struct * room)()
        count.value = room
        code = int(function(handle, ctypes.pointer(count), infos))
        if code != SUCCESS:
            raise self._error(name, code)
        per_pid: dict[int, int] = {}
        for info in infos[: min(int(count.value), room)]:
            used = int(info.used)
            if used != NOT_AVAILABLE:
                pid = int(info.pid)
                per_pid[pid] = per_pid.get(pid, 0) + used // MIB
        return per_pid

    def _first(self, lib: Any, names: Sequence[tuple[str, Any]]) -> tuple[str, Any]:
        for name, extra in names:
            if hasattr(lib, name):
                return name, extra
        raise ProbeError(
            self.dialect.vendor,
            names[0][0],
            ProbeFailure.LIBRARY_MISSING,
            "the library exports none of " + ", ".join(n for n, _ in names),
        )

    def _call(self, lib: Any, names: Sequence[str], *args: object) -> None:
        name, _ = self._first(lib, [(n, None) for n in names])
        code = int(getattr(lib, name)(*args))
        if code != SUCCESS:
            raise self._error(name, code)

    def _error(self, name: str, code: int) -> ProbeError:
        return ProbeError(self.dialect.vendor, name, ProbeFailure.TOOL_FAILED, f"returned {code}")


def by_uuid(
    per_index: dict[int, dict[int, int]], uuids: dict[int, str]
) -> dict[str, dict[int, int]]:
    """``per_index`` keyed by the uuid of each device index the probe last listed; an index it
    did not list is left out (nothing to charge it to)."""
    return {uuids[i]: rows for i, rows in per_index.items() if i in uuids}
