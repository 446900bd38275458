"""Huawei Ascend probe: parse ``npu-smi info`` (the summary table) plus per-NPU detail queries.

The summary table prints two rows per chip: an NPU row (id, name, health, power, temperature) and a
chip row (chip index, bus id, AI-core %, memory). ``npu-smi`` formats the used value as ``%-5d/``,
so once it reaches five digits the space before ``/`` disappears (``59356/ 65536``); the pair
regex below accepts both forms. Per NPU, ``-t board`` gives the serial number (our UUID) and
driver version, ``-t memory`` the capacity, ``-t common`` the AI-core count. Detail queries a board
does not support (exit non-zero) only leave those fields None; every other failure is raised.
A chip with vNPUs cut (``-t info-vnpu``, ``probes/npu_smi_vnpu.py``) is reported as its vNPUs.

After the device table the summary prints a process table (``print_proc_total_info`` and
``print_proc_total_info_with_HBM`` in the driver source: NPU id, chip index on that NPU, host PID,
name, and the process's device memory as bytes / 1024 / 1024, so MiB). ``process_memory`` reads it
for the agent's watch on shares (agent/share_watch.py), as NVML's per-process figures are read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xpupool.probes.base import (
    DeviceInfo,
    DeviceNodes,
    Health,
    PrintedRows,
    ProbeError,
    ProbeFailure,
    canonical,
)
from xpupool.probes.npu_smi_vnpu import parse_vnpu_info, vnpu_devices
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "huawei"
TOOL = "npu-smi"
_SUMMARY = "npu-smi info"

# "used / total" with or without the space before "/" (five-digit used values drop it).
_PAIR = re.compile(r"(\d+|NA)\s*/\s*(\d+)")
_NPU_ROW = re.compile(r"^(\d+)\s+(\S+)$")
_CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")
_VERSION = re.compile(r"Version:\s*(\S+)")
_NO_DEVICE = ("there is no npu card", "no npu found")
_PROC_HEADER = "Process id"
_PROC_MEMORY = "Process memory(MB)"
_NO_PROCESS = re.compile(r"^No running processes found in NPU\s+\d+$")
# npu-smi's health words (npu_common_get_health_state_str): OK, Warning, Alarm, Critical, UNKNOWN.
_HEALTH = {
    "OK": Health.HEALTHY,
    "WARNING": Health.UNHEALTHY,
    "ALARM": Health.UNHEALTHY,
    "CRITICAL": Health.UNHEALTHY,
}


@dataclass(frozen=True, slots=True)
class NpuChipRow:
    """One chip of the summary table; memory in MiB (npu-smi prints "MB", meaning MiB)."""

    npu_id: int
    chip_id: int
    name: str
    health: str
    power_watts: float | None
    temperature_c: float | None
    bus_id: str | None
    aicore_pct: float | None
    memory_used_mib: int | None
    memory_total_mib: int
    logic_id: int | None = None
    driver_version: str | None = None


def _parse_error(command: str, detail: str) -> ProbeError:
    return ProbeError(VENDOR, command, ProbeFailure.PARSE, detail)


def _number(token: str | None) -> float | None:
    """A printed number, or None for the tool's "NA" / "-" placeholders."""
    if token is None or token in {"NA", "-", "N/A"}:
        return None
    try:
        return float(token)
    except ValueError:
        return None


def _cells(line: str) -> list[str] | None:
    stripped = line.strip()
    if not (stripped.startswith("|") and stripped.endswith("|")):
        return None
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def parse_npu_smi_info(text: str) -> list[NpuChipRow]:
    """Chips of ``npu-smi info``, in table order; [] when the host has no NPU.

    Raises ProbeError(PARSE) when an NPU row has no chip row after it or a row has the wrong
    shape. The process table that follows the device table is ignored.
    """
    if not text.strip() or any(marker in text.lower() for marker in _NO_DEVICE):
        return []
    version_match = _VERSION.search(text)
    version = version_match.group(1) if version_match else None
    rows: list[NpuChipRow] = []
    pending: tuple[int, str, str, float | None, float | None] | None = None
    saw_header = False
    logic_column = False  # 310P prints "Chip Device" (logical id); 910C prints "Chip Phy-ID"
    for line in text.splitlines():
        if "Process id" in line:
            break
        cells = _cells(line)
        if cells is None or len(cells) != 3:
            continue
        if cells[0].startswith(("NPU", "Chip")):
            saw_header = True
            logic_column = logic_column or cells[0].split()[-1] == "Device"
            continue
        npu_match = _NPU_ROW.match(cells[0])
        if pending is None:
            if npu_match is None:
                raise _parse_error(_SUMMARY, f"expected an NPU row '<id> <name>', got {cells[0]!r}")
            metrics = cells[2].split()
            pending = (
                int(npu_match.group(1)),
                npu_match.group(2),
                cells[1],
                _number(metrics[0] if metrics else None),
                _number(metrics[1] if len(metrics) > 1 else None),
            )
            continue
        rows.append(_chip_row(pending, cells, version, logic_column))
        pending = None
    if pending is not None:
        raise _parse_error(_SUMMARY, f"expected a chip row after NPU {pending[0]}")
    if not rows and not saw_header:
        raise _parse_error(_SUMMARY, "expected the 'NPU Name | Health' table header")
    return rows


def _chip_row(
    npu: tuple[int, str, str, float | None, float | None],
    cells: list[str],
    version: str | None,
    logic_column: bool,
) -> NpuChipRow:
    chip_match = _CHIP_ROW.match(cells[0])
    pairs = _PAIR.findall(cells[2])
    if chip_match is None or not pairs:
        raise _parse_error(
            _SUMMARY,
            f"expected a chip row '<chip> | <bus-id> | <aicore> <used>/ <total>' "
            f"after NPU {npu[0]}, got {'|'.join(cells)!r}",
        )
    used, total = pairs[-1]  # HBM pair when printed (910), else the memory pair (310P)
    if int(total) == 0 and len(pairs) > 1:
        used, total = pairs[0]
    npu_id, name, health, power, temp = npu
    logic = chip_match.group(2)
    return NpuChipRow(
        npu_id=npu_id,
        chip_id=int(chip_match.group(1)),
        name=name,
        health=health,
        power_watts=power,
        temperature_c=temp,
        bus_id=None if cells[1] in {"NA", ""} else cells[1],
        aicore_pct=_number(cells[2].split()[0]),
        memory_used_mib=None if used == "NA" else int(used),
        memory_total_mib=int(total),
        logic_id=int(logic) if logic is not None and logic_column else None,
        driver_version=version,
    )


@dataclass(frozen=True, slots=True)
class NpuProcess:
    """One row of the summary's process table: a host process and the chip memory it holds."""

    npu_id: int
    chip_id: int  # the chip's index on its NPU, as in the device table's chip row
    pid: int
    name: str
    memory_mib: int


def parse_npu_processes(text: str, skipped: list[str] | None = None) -> list[NpuProcess]:
    """The process table of ``npu-smi info``; [] when it lists no process.

    Raises ProbeError(PARSE) when there is no process table (npu-smi prints none on some 310
    boards: nothing can be told then, which is not "nothing runs"). A row of the wrong shape is
    left out, with why appended to ``skipped``, and the other rows are kept: the name is the
    process's own (a job sets it), and a newline in it cuts its row, which must cost that row,
    not the whole table (a job could otherwise switch the share watch off for every replica).
    A row that only looks right (a forged one after the cut) is the watch's to refuse: it
    charges a row only to a process holding the card's node (agent/card_holders.py). A table
    with an extra column (``Process id in container``, printed inside containers) is read by
    its header; a ``|`` in a name is kept in the name, since every other column is a number.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _PROC_HEADER in line), None)
    if start is None:
        raise _parse_error(_SUMMARY, f"expected the process table ('{_PROC_HEADER}' header)")
    header = _cells(lines[start]) or []
    if _PROC_HEADER not in header or _PROC_MEMORY not in header:
        raise _parse_error(
            _SUMMARY, f"expected '{_PROC_HEADER}' and '{_PROC_MEMORY}' columns, got {header!r}"
        )
    pid_at, memory_at = header.index(_PROC_HEADER), header.index(_PROC_MEMORY)
    name_at = header.index("Process name") if "Process name" in header else None
    processes: list[NpuProcess] = []
    dropped = skipped if skipped is not None else []
    for line in lines[start + 1 :]:
        cells = _cells(line)
        if cells is None and line.lstrip().startswith("|"):
            dropped.append(f"process row cut off: {line.strip()!r}")
            continue
        if cells is None or (len(cells) == 1 and _NO_PROCESS.match(cells[0])):
            continue  # rules, the tool's trailing warnings, "No running processes found"
        extra = len(cells) - len(header)
        if extra > 0 and name_at is not None:  # a process may put "|" in its own name
            cells[name_at : name_at + extra + 1] = ["|".join(cells[name_at : name_at + extra + 1])]
        chip = re.fullmatch(r"(\d+)\s+(\d+)", cells[0])
        if (
            len(cells) != len(header)
            or chip is None
            or not cells[pid_at].isdigit()
            or not cells[memory_at].isdigit()
        ):
            dropped.append(
                "expected a process row '<npu> <chip> | <pid> | <name> | <MiB>', "
                f"got {'|'.join(cells)!r}"
            )
            continue
        processes.append(
            NpuProcess(
                npu_id=int(chip.group(1)),
                chip_id=int(chip.group(2)),
                pid=int(cells[pid_at]),
                name=cells[name_at] if name_at is not None else "",
                memory_mib=int(cells[memory_at]),
            )
        )
    return processes


def _kv_blocks(text: str) -> list[dict[str, str]]:
    """``key : value`` lines grouped into blocks; a blank line or a repeated key starts a block."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            if not line.strip() and blocks[-1]:
                blocks.append({})
            continue
        if key.strip() in blocks[-1]:
            blocks.append({})
        blocks[-1][key.strip()] = value.strip()
    return [block for block in blocks if block]


def parse_npu_board(text: str) -> dict[str, str]:
    """Fields of ``npu-smi info -t board -i N`` by printed key (``Serial Number``, ...)."""
    fields: dict[str, str] = {}
    for block in _kv_blocks(text):
        for key, value in block.items():
            fields.setdefault(key, value)
    if "NPU ID" not in fields:
        raise _parse_error("npu-smi info -t board", "expected a 'NPU ID : <n>' line")
    return fields


def parse_npu_memory(text: str) -> dict[int, int]:
    """Capacity in MiB per chip (HBM where the chip has it, else DDR) of ``-t memory -i N``."""
    capacities: dict[int, int] = {}
    chip_blocks = [
        b for b in _kv_blocks(text) if "HBM Capacity(MB)" in b or "DDR Capacity(MB)" in b
    ]
    if not chip_blocks:
        raise _parse_error(
            "npu-smi info -t memory", "expected 'HBM Capacity(MB)' or 'DDR Capacity(MB)'"
        )
    for position, block in enumerate(chip_blocks):
        chip = int(block.get("Chip ID", position))
        hbm = int(_number(block.get("HBM Capacity(MB)")) or 0)
        capacities[chip] = hbm or int(_number(block.get("DDR Capacity(MB)")) or 0)
    return capacities


def parse_npu_common(text: str) -> dict[int, dict[str, str]]:
    """Per-chip fields of ``-t common -i N`` (``Aicore Count``, ...); the MCU block is dropped."""
    chips: dict[int, dict[str, str]] = {}
    for block in _kv_blocks(text):
        if "Chip ID" in block and block.get("Chip Name", "").lower() != "mcu":
            chips[int(block["Chip ID"])] = block
    return chips


def _health(printed: str) -> tuple[Health, str]:
    health = _HEALTH.get(printed.upper(), Health.UNKNOWN)
    if health is Health.HEALTHY:
        return health, ""
    kind = printed.lower() if printed.upper() in _HEALTH else "unknown"
    return health, f"npu-{kind}: npu-smi health: {printed}"  # its kind first (health_causes.py)


class NpuSmiProbe:
    """Ascend NPUs via ``npu-smi``: one DeviceInfo per chip (a 310P Duo card reports two)."""

    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # rows a process name can forge: agent/card_holders.py

    def __init__(self) -> None:
        # (npu id, chip index) -> the UUID discover gave that chip; the process table names
        # chips by these two numbers only
        self._uuids: dict[tuple[int, int], str] = {}
        self.rows_skipped: list[str] = []  # the last process table's rows left out, and why
        self.skipped: list[str] = []  # the last discovery's vNPUs left out, and why

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: tool missing, permission, timeout, failed summary, parse."""
        self.skipped = []
        return self._discover(parse_npu_smi_info(run_tool(VENDOR, [TOOL, "info"])))

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per chip UUID: ``{uuid: {pid: mib}}``,
        every chip of the table present (``{}``: nothing runs on it), for the agent's watch on
        shares as NVML's is. One ``npu-smi info``; the detail queries run again only when the
        table shows a chip discover has not named. A process row that cannot be read, or names
        a chip the table does not list, is left out and said in ``rows_skipped`` (the monitor
        logs it); the other rows count. Raises ProbeError when there is no process table.
        """
        text = run_tool(VENDOR, [TOOL, "info"])
        rows = parse_npu_smi_info(text)
        self.rows_skipped = []
        processes = parse_npu_processes(text, self.rows_skipped)
        if any((row.npu_id, row.chip_id) not in self._uuids for row in rows):
            self._discover(rows)
        usage: dict[str, dict[int, int]] = {
            self._uuids[(row.npu_id, row.chip_id)]: {} for row in rows
        }
        listed = {(row.npu_id, row.chip_id) for row in rows}
        charged = PrintedRows(usage, self.rows_skipped)
        for proc in processes:
            if (proc.npu_id, proc.chip_id) not in listed:
                self.rows_skipped.append(
                    f"process {proc.pid} is on NPU {proc.npu_id} chip {proc.chip_id}, "
                    "which the device table does not list"
                )
                continue
            charged.add(self._uuids[(proc.npu_id, proc.chip_id)], proc.pid, proc.memory_mib)
        return charged.usage

    def _discover(self, rows: list[NpuChipRow]) -> list[DeviceInfo]:
        per_npu: dict[int, tuple[dict[str, str], dict[int, int], dict[int, dict[str, str]]]] = {}
        for npu_id in dict.fromkeys(row.npu_id for row in rows):
            board_text = self._detail(npu_id, "board")
            memory_text = self._detail(npu_id, "memory")
            board = parse_npu_board(board_text) if board_text else {}
            memory = parse_npu_memory(memory_text) if memory_text else {}
            common = parse_npu_common(self._detail(npu_id, "common"))
            per_npu[npu_id] = (board, memory, common)
        chips_per_npu = {n: sum(r.npu_id == n for r in rows) for n in per_npu}
        devices = [
            self._device(position, row, *per_npu[row.npu_id], chips_per_npu[row.npu_id])
            for position, row in enumerate(rows)
        ]
        self._uuids = {(r.npu_id, r.chip_id): d.uuid for r, d in zip(rows, devices, strict=True)}
        out: list[DeviceInfo] = []
        for row, device in zip(rows, devices, strict=True):
            listing = self._vnpus(row.npu_id, row.chip_id)
            cut = vnpu_devices(device, parse_vnpu_info(listing), self.skipped) if listing else []
            out.extend(cut or (device,))
        return out

    def chip_of(self, uuid: str) -> tuple[int, int] | None:
        """The (NPU id, chip id) of the chip ``uuid`` as the last discovery read it, what
        ``npu-smi set -i -c`` take (``agent/recut.py``); None for a chip not read."""
        return next((key for key, u in self._uuids.items() if u == uuid), None)

    @staticmethod
    def _vnpus(npu_id: int, chip_id: int) -> str:
        """Output of ``npu-smi info -t info-vnpu -i <npu> -c <chip>``; "" when the chip does not
        answer it (not in vNPU mode, an older npu-smi)."""
        try:
            argv = [TOOL, "info", "-t", "info-vnpu", "-i", str(npu_id), "-c", str(chip_id)]
            return run_tool(VENDOR, argv)
        except ProbeError as exc:
            if exc.kind is ProbeFailure.TOOL_FAILED:
                return ""
            raise

    @staticmethod
    def _detail(npu_id: int, kind: str) -> str:
        """Output of ``npu-smi info -t <kind> -i <npu>``; "" when this board does not support it."""
        try:
            return run_tool(VENDOR, [TOOL, "info", "-t", kind, "-i", str(npu_id)])
        except ProbeError as exc:
            if exc.kind is ProbeFailure.TOOL_FAILED:
                return ""
            raise

    @staticmethod
    def _device(
        position: int,
        row: NpuChipRow,
        board: dict[str, str],
        memory: dict[int, int],
        common: dict[int, dict[str, str]],
        chip_count: int,
    ) -> DeviceInfo:
        # UUID: the board serial, else the PCIe address, else the NPU id; "-<chip>" when the
        # board carries several chips (310P Duo, 910C), since they share serial and bus.
        serial = board.get("Serial Number", "NA")
        if serial not in {"NA", ""}:
            uuid = serial
        elif row.bus_id is not None:
            uuid = f"ascend-{row.bus_id}"
        else:
            uuid = f"ascend-npu{row.npu_id}"
        if chip_count > 1:
            uuid = f"{uuid}-{row.chip_id}"
        aicore = _number(common.get(row.chip_id, {}).get("Aicore Count"))
        health, detail = _health(row.health)
        return DeviceInfo(
            vendor=VENDOR,
            model=row.name,
            uuid=uuid,
            index=row.logic_id if row.logic_id is not None else position,
            memory_total_mib=row.memory_total_mib or memory.get(row.chip_id, 0),
            canonical_model=canonical(row.name, VENDOR),
            memory_used_mib=row.memory_used_mib,
            compute_units=int(aicore) if aicore is not None else None,
            utilization_pct=row.aicore_pct,
            power_watts=row.power_watts,
            temperature_c=row.temperature_c,
            driver_version=board.get("Software Version") or row.driver_version,
            link_group="hccs" if "910" in row.name else None,
            health=health,
            health_detail=detail,
        )


# What Ascend's own container start mounts next to the device nodes: the DCMI library, npu-smi,
# the driver's user-space libraries and its version files (openmerlin/openmind-resource-template
# image_center/docs/mindspore_quick_start.md; the same set as Ascend Docker Runtime's mount list).
ASCEND_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Huawei Ascend: ``/dev/davinci<N>`` per NPU and the three shared control nodes
    ``davinci_manager``, ``devmm_svm`` (shared virtual memory) and ``hisi_hdc`` (host-device
    channel), plus :data:`ASCEND_MOUNTS`. ``N`` is the chip's physical id, taken to be the logic id
    npu-smi prints; they differ only on boards where chips were disabled.
    """
    return DeviceNodes(
        required=(
            *(f"davinci{i}" for i in indices),
            "davinci_manager",
            "devmm_svm",
            "hisi_hdc",
        ),
        mounts=ASCEND_MOUNTS,
    )
