"""The shared shape of probes that talk to a vendor's Python library (NVML, amdsmi).

The library is imported lazily, so the module imports on any host; every session is opened and
closed around the work (``init``/``shutdown`` names differ per library); an optional metric that
the library refuses becomes None with the reason kept in ``skipped``. A subclass only says which
library and entry points it uses, and what to read inside a session.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar

from xpupool.probes.base import DeviceInfo, ProbeError, ProbeFailure


class LibraryProbe:
    vendor: ClassVar[str]
    module_name: ClassVar[str]  # "pynvml"
    install_hint: ClassVar[str]  # "install nvidia-ml-py"
    init_name: ClassVar[str]  # "nvmlInit"
    shutdown_name: ClassVar[str]  # "nvmlShutdown"

    def __init__(self, library: ModuleType | None = None) -> None:
        self._library = library
        self.skipped: list[str] = []

    def library(self) -> Any:
        if self._library is None:
            try:
                self._library = importlib.import_module(self.module_name)
            except ImportError as exc:
                raise ProbeError(
                    self.vendor,
                    f"import {self.module_name}",
                    ProbeFailure.LIBRARY_MISSING,
                    f"{exc}; {self.install_hint}",
                ) from None
        return self._library

    def available(self) -> bool:
        try:
            with self.session():
                return True
        except Exception:  # any failure means "not here"; discover() says why
            return False

    def discover(self) -> list[DeviceInfo]:
        with self.session() as lib:
            self.skipped = []
            return self.read_devices(lib)

    def read_devices(self, lib: Any) -> list[DeviceInfo]:
        raise NotImplementedError

    @contextmanager
    def session(self) -> Iterator[Any]:
        """The library, initialised for the duration of the block; init failures are ProbeErrors."""
        lib = self.library()
        try:
            getattr(lib, self.init_name)()
        except Exception as exc:
            raise ProbeError(self.vendor, self.init_name, init_failure(exc), str(exc)) from None
        try:
            yield lib
        finally:
            try:
                getattr(lib, self.shutdown_name)()
            except Exception:
                self.skipped.append(f"{self.shutdown_name} failed")

    def optional(self, read: Callable[[], Any], what: str) -> Any:
        """``read()``, or None when the library refuses (the reason goes to ``skipped``)."""
        try:
            return read()
        except Exception as exc:
            self.skipped.append(f"{what}: {exc}")
            return None


def init_failure(exc: Exception) -> ProbeFailure:
    text = str(exc).lower()
    if "permission" in text or "insufficient" in text:
        return ProbeFailure.PERMISSION
    if "library" in text or "not found" in text:
        return ProbeFailure.LIBRARY_MISSING
    return ProbeFailure.TOOL_FAILED
