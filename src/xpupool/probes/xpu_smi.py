"""``xpu-smi``: one tool name, two vendors, told apart by what the tool prints.

Kunlunxin (P800) ships an ``xpu-smi`` whose default output is an nvidia-smi-like table headed
``XPU-SMI ... Driver Version: ... XPU-RT Version: ...``; Intel's XPU Manager ships an ``xpu-smi``
whose ``discovery --dump`` prints CSV headed ``Device ID,Device Name,...``. Which tool is installed
cannot be known from its name, so :func:`parse_xpu_smi` decides the vendor from the output itself
and every :class:`DeviceInfo` carries the vendor it was read from.

Health: Kunlunxin's table carries a ``Volatile Uncorr. ECC`` cell; on Intel, ``xpu-smi health
-l`` prints per device (``| Device ID | 0 |``) one ``Status:`` per component (core and memory
temperature, power, memory, Xe Link port, frequency; Intel's smi_user_guide.md, which shows both
``Ok`` and ``OK``). A component in ``Warning`` or ``Critical`` (XPU Manager's health states besides
OK and Unknown), or any word outside those, makes the card unhealthy with a cause of kind
``other``; ``Unknown`` only says the component cannot be read. An Intel host where the health
query fails keeps its cards' health unknown, with the reason in ``skipped``.

Per-process memory (the agent's watch on shares): Intel's ``xpu-smi ps`` prints one row per
process and device, ``PID Command DeviceID SHR MEM``, with ``MEM`` the device memory the process
allocated, in kB (the same guide). It is read as 1000 bytes, the smaller reading, so that a
process is never charged more than it holds. Kunlunxin's table has a ``Processes:`` section
whose header is published but no row of it is, so Kunlunxin processes are not read.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from xpupool.probes.base import (
    MIB_PER_UNIT,
    DeviceInfo,
    DeviceNodes,
    Health,
    PrintedRows,
    ProbeError,
    ProbeFailure,
    canonical,
    render_node,
)
from xpupool.probes.tool import run_tool, tool_present

KUNLUNXIN = "kunlunxin"
INTEL = "intel"
TOOL = "xpu-smi"
KUNLUNXIN_ARGV: tuple[str, ...] = (TOOL,)
# Property ids of Intel's `discovery --dump` (smi_user_guide.md): 1 Device ID, 2 Device Name,
# 4 UUID, 8 Driver Version, 11 PCI BDF Address, 16 Memory Physical Size.
INTEL_ARGV: tuple[str, ...] = (TOOL, "discovery", "--dump", "1,2,4,8,11,16")
INTEL_HEALTH_ARGV: tuple[str, ...] = (TOOL, "health", "-l")
INTEL_PS_ARGV: tuple[str, ...] = (TOOL, "ps")
_PS_COLUMNS = ("PID", "Command", "DeviceID", "SHR", "MEM")
_HEALTH_DEVICE = re.compile(r"^\|\s*Device ID\s*\|\s*(\d+)\s*\|")
_HEALTH_ROW = re.compile(r"^\|\s*\d+\.\s*(?P<part>[^|]*?)\s*\|\s*Status:\s*(?P<status>[^|]*?)\s*\|")
_HEALTH_FINE = frozenset({"ok", "unknown"})

_KL_HEADER = re.compile(
    r"XPU-SMI\s+Driver Version:\s*(?P<driver>\S+)(?:\s+XPU-RT Version:\s*(?P<rt>\S+))?"
)
_KL_ROW1 = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+\S+\s*\|\s*"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+\S+\s*\|"
    r"(?:\s*(?P<ecc>\S+)\s*\|)?"  # Volatile Uncorr. ECC, as nvidia-smi's table
)
_KL_ROW2 = re.compile(
    r"^\|\s*\S+\s+(?P<temp>\S+)\s+\S+\s+(?P<power>\S+)\s*/\s*\S+\s*\|\s*"
    r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|\s*(?P<util>\S+)"
)


def parse_xpu_smi(text: str) -> list[DeviceInfo]:
    """Devices in either vendor's output; raises ProbeError(PARSE) when it is neither shape."""
    if _KL_HEADER.search(text):
        return parse_kunlunxin_table(text)
    if text.lstrip().lower().startswith("device id,"):
        return parse_intel_dump(text)
    raise ProbeError(
        KUNLUNXIN,
        TOOL,
        ProbeFailure.PARSE,
        "expected a Kunlunxin 'XPU-SMI ... Driver Version' table or Intel "
        "'Device ID,Device Name,...' CSV from 'xpu-smi discovery --dump'",
    )


def parse_kunlunxin_table(text: str) -> list[DeviceInfo]:
    """Kunlunxin default table: two lines per XPU (name/bus, then temp/power/memory/util).

    The table prints no UUID, so ``uuid`` is ``kunlunxin-<PCI bus id>`` (stable per slot).
    """
    header = _KL_HEADER.search(text)
    if header is None:
        raise ProbeError(KUNLUNXIN, TOOL, ProbeFailure.PARSE, "expected 'XPU-SMI Driver Version'")
    runtimes = {"xpu-rt": header["rt"]} if header["rt"] else {}
    lines = text.splitlines()
    devices: list[DeviceInfo] = []
    for number, line in enumerate(lines):
        first = _KL_ROW1.match(line)
        if first is None:
            continue
        second = _KL_ROW2.match(lines[number + 1]) if number + 1 < len(lines) else None
        if second is None:
            raise ProbeError(
                KUNLUNXIN,
                TOOL,
                ProbeFailure.PARSE,
                f"XPU {first['index']}: expected 'Temp Pwr:Usage/Cap | used MiB / total MiB' "
                f"on the line after {line.strip()!r}",
            )
        model = first["name"].strip()
        health, detail = _kunlunxin_health(first["ecc"])
        devices.append(
            DeviceInfo(
                vendor=KUNLUNXIN,
                model=model,
                canonical_model=_canonical_kunlunxin(model),
                uuid=f"{KUNLUNXIN}-{first['bus'].lower()}",
                index=int(first["index"]),
                memory_total_mib=int(second["total"]),
                memory_used_mib=int(second["used"]),
                utilization_pct=_number(second["util"], "%"),
                power_watts=_number(second["power"], "W"),
                temperature_c=_number(second["temp"], "C"),
                driver_version=header["driver"],
                runtimes=runtimes,
                health=health,
                health_detail=detail,
            )
        )
    return devices


def _kunlunxin_health(ecc: str | None) -> tuple[Health, str]:
    """The table's ``Volatile Uncorr. ECC`` cell: 0 healthy, more unhealthy (as NVML's volatile
    uncorrectable count, ``probes/nvml.py``), N/A or absent unknown."""
    if ecc is None or not ecc.isdigit():
        return Health.UNKNOWN, ""
    if int(ecc) == 0:
        return Health.HEALTHY, ""
    return Health.UNHEALTHY, f"ecc-uncorrectable: {int(ecc)} volatile uncorrectable ECC error(s)"


def parse_intel_dump(text: str) -> list[DeviceInfo]:
    """Intel ``xpu-smi discovery --dump 1,2,4,8,11,16`` CSV, columns found by header name."""
    rows = [row for row in csv.reader(text.strip().splitlines()) if row]
    if not rows:
        raise ProbeError(INTEL, " ".join(INTEL_ARGV), ProbeFailure.PARSE, "expected a CSV header")
    header = [name.strip().lower() for name in rows[0]]
    columns = {name: i for i, name in enumerate(header)}
    for needed in ("device id", "device name", "memory physical size"):
        if needed not in columns:
            raise ProbeError(
                INTEL, " ".join(INTEL_ARGV), ProbeFailure.PARSE, f"expected column {needed!r}"
            )
    uuid_col = columns.get("uuid", columns.get("soc uuid"))
    devices: list[DeviceInfo] = []
    for row in rows[1:]:
        cells = [cell.strip() for cell in row] + [""] * (len(header) - len(row))

        def cell(name: str, cells: list[str] = cells) -> str | None:
            i = columns.get(name)
            return cells[i] if i is not None and cells[i] not in ("", "N/A", "unknown") else None

        index, model, size = cell("device id"), cell("device name"), cell("memory physical size")
        memory = _mib(size) if size else None
        if index is None or not index.isdigit() or model is None or memory is None:
            raise ProbeError(
                INTEL,
                " ".join(INTEL_ARGV),
                ProbeFailure.PARSE,
                f"expected 'id,name,...,<n> MiB' in row {','.join(row)!r}",
            )
        uuid = cells[uuid_col] if uuid_col is not None and cells[uuid_col] else None
        devices.append(
            DeviceInfo(
                vendor=INTEL,
                model=model,
                canonical_model=canonical(model, INTEL),
                uuid=uuid or f"{INTEL}-{cell('pci bdf address') or index}",
                index=int(index),
                memory_total_mib=memory,
                driver_version=cell("driver version"),
            )
        )
    return devices


def parse_intel_health(text: str) -> dict[int, tuple[Health, str]]:
    """(health, cause) per device id of Intel's ``xpu-smi health -l`` table (module docstring):
    the first component not Ok or Unknown names the cause; a device whose every component is
    Unknown stays unknown. Raises ProbeError(PARSE) when no ``Device ID`` row is found, or a
    device lists no component."""
    parts: dict[int, list[tuple[str, str]]] = {}
    device: int | None = None
    for line in text.splitlines():
        found = _HEALTH_DEVICE.match(line)
        if found is not None:
            device = int(found.group(1))
            parts[device] = []
            continue
        row = _HEALTH_ROW.match(line)
        if row is not None and device is not None:
            parts[device].append((row["part"], row["status"]))
    command = " ".join(INTEL_HEALTH_ARGV)
    if not parts or not all(parts.values()):
        raise ProbeError(
            INTEL, command, ProbeFailure.PARSE, "expected '| Device ID | N |' and 'Status:' rows"
        )
    health: dict[int, tuple[Health, str]] = {}
    for index, statuses in parts.items():
        bad = [(part, status) for part, status in statuses if status.lower() not in _HEALTH_FINE]
        if bad:
            said = "; ".join(f"{part} {status}" for part, status in bad)
            health[index] = (Health.UNHEALTHY, f"xpu-smi health: {said}")  # kind other
        elif all(status.lower() == "unknown" for _, status in statuses):
            health[index] = (Health.UNKNOWN, "")
        else:
            health[index] = (Health.HEALTHY, "")
    return health


def parse_intel_ps(text: str, skipped: list[str] | None = None) -> list[tuple[int, int, int]]:
    """(pid, device id, MiB) per row of Intel's ``xpu-smi ps``; [] when no process is listed.
    The command name is the one free column (it may hold spaces), so the row is read from both
    ends. Raises ProbeError(PARSE) without the ``PID Command DeviceID SHR MEM`` header; a row
    whose numbers are not numbers (a name with a newline cuts its row) is left out, with why
    appended to ``skipped``, and the other rows kept."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    command = " ".join(INTEL_PS_ARGV)
    if not lines or tuple(lines[0]) != _PS_COLUMNS:
        raise ProbeError(
            INTEL, command, ProbeFailure.PARSE, f"expected the header {' '.join(_PS_COLUMNS)!r}"
        )
    rows: list[tuple[int, int, int]] = []
    dropped = skipped if skipped is not None else []
    for cells in lines[1:]:
        numbers = [cells[0], *cells[-3:]] if len(cells) >= 4 else []
        if not numbers or not all(n.isdigit() for n in numbers):
            dropped.append(
                f"expected '<pid> <command> <device> <shr kB> <mem kB>', got {' '.join(cells)!r}"
            )
            continue
        pid, device, _shared, mem_kb = (int(n) for n in numbers)
        rows.append((pid, device, mem_kb * 1000 // (1 << 20)))
    return rows


class XpuSmiProbe:
    """Kunlunxin or Intel ``xpu-smi``; ``vendor`` is the key the tool name alias maps to.

    ``discover`` first runs plain ``xpu-smi`` (Kunlunxin prints its table; Intel prints help or a
    summary, or exits non-zero); anything but a Kunlunxin table leads to Intel's
    ``discovery --dump``. Devices carry the vendor their output showed.
    """

    vendor: ClassVar[str] = KUNLUNXIN
    prints_names: ClassVar[bool] = True  # rows a process name can forge: agent/card_holders.py
    covers: ClassVar[tuple[str, ...]] = (KUNLUNXIN, INTEL)
    """Every vendor this one tool serves: all are named when it is absent (issue 42: ``xpupool
    probe`` named Kunlunxin alone, so an Intel host was never told which tool it lacks)."""

    def __init__(self) -> None:
        self.skipped: list[str] = []  # what could not be read, for the monitor's log
        self.rows_skipped: list[str] = []  # the last ``ps`` rows left out, and why
        self._intel_uuids: dict[int, str] = {}  # Intel device id -> UUID, from discover
        self._kunlunxin = False  # the last discover read Kunlunxin's table

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per Intel card UUID (every card, ``{}``
        when idle), for the agent's watch on shares. Raises ProbeError on a Kunlunxin host (its
        rows are not read: module docstring); a row that cannot be read, or is on a device
        discover does not know, is left out and said in ``rows_skipped``."""
        if not self._intel_uuids and not self._kunlunxin:
            self.discover()
        if not self._intel_uuids:
            raise ProbeError(
                KUNLUNXIN, TOOL, ProbeFailure.PARSE, "per-process memory is read on Intel only"
            )
        self.rows_skipped = []
        rows = parse_intel_ps(run_tool(INTEL, INTEL_PS_ARGV), self.rows_skipped)
        if any(device not in self._intel_uuids for _, device, _ in rows):
            self.discover()
        charged = PrintedRows(self._intel_uuids.values(), self.rows_skipped)
        for pid, device, mib in rows:
            uuid = self._intel_uuids.get(device)
            if uuid is None:
                self.rows_skipped.append(
                    f"process {pid} is on device {device}, which discovery does not list"
                )
                continue
            charged.add(uuid, pid, mib)
        return charged.usage

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        self.skipped = []
        try:
            text = run_tool(self.vendor, KUNLUNXIN_ARGV)
        except ProbeError as exc:
            if exc.kind is not ProbeFailure.TOOL_FAILED:
                raise
            text = ""
        self._kunlunxin = bool(_KL_HEADER.search(text))
        if self._kunlunxin:
            self._intel_uuids = {}
            return parse_kunlunxin_table(text)
        devices = parse_xpu_smi(run_tool(INTEL, INTEL_ARGV))
        self._intel_uuids = {d.index: d.uuid for d in devices if d.vendor == INTEL}
        if not self._intel_uuids:
            return devices
        try:
            health = parse_intel_health(run_tool(INTEL, INTEL_HEALTH_ARGV))
        except ProbeError as exc:  # an older xpu-smi, or an odd table: health stays unknown
            self.skipped.extend(f"{d.uuid} health: {exc}" for d in devices)
            return devices
        return [
            replace(d, health=health[d.index][0], health_detail=health[d.index][1])
            if d.index in health
            else d
            for d in devices
        ]


def _canonical_kunlunxin(model: str) -> str | None:
    """The table prints the form factor after the chip (``P800 OAM``); the catalog names the chip."""
    return canonical(model, KUNLUNXIN) or canonical(model.split()[0], KUNLUNXIN)


def _number(text: str, unit: str) -> float | None:
    value = text.strip().removesuffix(unit)
    try:
        return float(value)
    except ValueError:
        return None  # N/A


def _mib(text: str) -> int | None:
    match = re.fullmatch(r"([\d.]+)\s*([A-Za-z]*)", text.strip())
    if match is None:
        return None
    factor = MIB_PER_UNIT.get(match[2].lower() or "mib")
    return round(float(match[1]) * factor) if factor is not None else None


def kunlunxin_device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Kunlunxin: ``/dev/xpu<N>`` per card and the control node ``/dev/xpuctrl`` (Kunlunxin's XRE
    troubleshooting guide lists ``/dev/xpu0``, ``/dev/xpu1``, ``/dev/xpuctrl``; PaddlePaddle's XPU
    container start passes exactly these).
    """
    return DeviceNodes(required=(*(f"xpu{i}" for i in indices), "xpuctrl"))


def intel_device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Intel data-centre GPUs (Level Zero): each card's DRM render node, with AMD's index-to-DRM
    assumption; Intel's container guides pass ``--device /dev/dri``, which would show every card.
    Gaudi (``/dev/accel``) is not covered: no Gaudi probe reports it.
    """
    return DeviceNodes(required=tuple(render_node(i) for i in indices))
