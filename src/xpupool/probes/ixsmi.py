"""Iluvatar CoreX GPUs through ``ixsmi``, the vendor's nvidia-smi work-alike.

``ixsmi`` accepts nvidia-smi's ``--query-gpu=... --format=csv`` (GPUStack's Iluvatar detector uses
index, name, memory.total, memory.used, utilization.gpu and temperature.gpu). The probe asks with
the header kept and maps columns by name, so a field an older ixsmi does not know, or prints as
``[N/A]`` / ``[Not Supported]``, becomes None instead of shifting every column after it.

Per-process device memory (the agent's watch on shares) comes from Iluvatar's ``libixml.so``,
which exports NVML's calls (``probes/nvml_shaped.py``: its source is the Iluvatar extractor in
nvtop), one list per device index, charged to the card ixsmi listed at that index. No public
capture shows ixsmi's own process table or a ``--query-compute-apps`` of it, so the tool is not
asked. That the library's index is ixsmi's, and ``/dev/iluvatar<index>`` the card's node, is
unverified on hardware: the rows go through the agent's device-node check (``prints_names``),
so a row charged to the wrong card is dropped, never acted on.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from typing import ClassVar

from xpupool.probes.base import DeviceInfo, DeviceNodes, ProbeError, ProbeFailure, canonical
from xpupool.probes.nvml_shaped import IXML, CompatProcesses, by_uuid
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "iluvatar"
TOOL = "ixsmi"
FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "driver_version",
)
ARGV: tuple[str, ...] = (TOOL, f"--query-gpu={','.join(FIELDS)}", "--format=csv")
_REQUIRED = ("index", "name", "memory.total")
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}
_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # "memory.total [MiB]" -> "memory.total"


def parse_ixsmi(text: str) -> list[DeviceInfo]:
    """Devices from ``ixsmi --query-gpu=... --format=csv`` (header row first).

    "No devices were found" means an empty list; anything without a header naming index, name
    and memory.total raises ProbeError(PARSE).
    """
    if "no devices were found" in text.lower():
        return []
    rows = [row for row in csv.reader(text.strip().splitlines(), skipinitialspace=True) if row]
    if not rows:
        raise ProbeError(VENDOR, " ".join(ARGV), ProbeFailure.PARSE, "expected a CSV header")
    header = [_UNIT.sub("", name.strip()).lower() for name in rows[0]]
    missing = [name for name in _REQUIRED if name not in header]
    if missing:
        raise ProbeError(
            VENDOR,
            " ".join(ARGV),
            ProbeFailure.PARSE,
            f"expected CSV header with {', '.join(_REQUIRED)}; missing {', '.join(missing)}",
        )
    return [_device(dict(zip(header, row, strict=False)), row) for row in rows[1:]]


def _device(cells: dict[str, str], row: list[str]) -> DeviceInfo:
    def value(name: str) -> str | None:
        raw = cells.get(name, "").strip()
        return None if raw.lower() in _MISSING else raw

    index, model, total = value("index"), value("name"), _number(value("memory.total"))
    if index is None or not index.isdigit() or model is None or total is None:
        raise ProbeError(
            VENDOR,
            " ".join(ARGV),
            ProbeFailure.PARSE,
            f"expected '<index>, <name>, <n> MiB, ...' in row {', '.join(row)!r}",
        )
    used = _number(value("memory.used"))
    return DeviceInfo(
        vendor=VENDOR,
        model=model,
        canonical_model=canonical(model, VENDOR),
        uuid=value("uuid") or f"{VENDOR}-{index}",
        index=int(index),
        memory_total_mib=int(total),
        memory_used_mib=int(used) if used is not None else None,
        utilization_pct=_number(value("utilization.gpu")),
        power_watts=_number(value("power.draw")),
        temperature_c=_number(value("temperature.gpu")),
        driver_version=value("driver_version"),
    )


class IxsmiProbe:
    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # not names: an unverified index, proven by the node check

    def __init__(self, processes: CompatProcesses | None = None) -> None:
        self.processes = processes or CompatProcesses(IXML)
        self.uuids: dict[int, str] = {}  # index -> uuid, as the last discover() listed them

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        devices = parse_ixsmi(run_tool(self.vendor, ARGV))
        self.uuids = {d.index: d.uuid for d in devices}
        return devices

    def process_memory(self) -> dict[str, dict[int, int]]:
        """``{uuid: {pid: MiB}}`` through libixml (module docstring); raises ProbeError."""
        return by_uuid(self.processes.read(), self.uuids)


def _number(text: str | None) -> float | None:
    """``"32768 MiB"``, ``"12 %"``, ``"35 C"``, ``"61.20 W"`` -> the number; None when absent."""
    if text is None:
        return None
    match = re.match(r"-?\d+(?:\.\d+)?", text)
    return float(match[0]) if match else None


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Iluvatar CoreX: ``/dev/iluvatar<N>`` per card, no control node (a device plugin's injected
    nodes, major 508, and the FlagOS runtime README's ``--device /dev/iluvatar0``). ``N`` is the
    driver's minor number, taken to be the ixsmi index; a host whose cards were renumbered needs the
    mapping from the driver. The CoreX libraries are mounted where installed.
    """
    return DeviceNodes(
        required=tuple(f"iluvatar{i}" for i in indices), mounts=("/usr/local/corex",)
    )
