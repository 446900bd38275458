"""Hygon DCU probe: parse the JSON of ``hy-smi`` (a rocm-smi fork) in one call.

hy-smi renamed rocm-smi's keys and changed their units: older drivers print ``Card series`` and
``VRAM Total Memory (B)`` (bytes) with ``GPU use (%)``; newer hy-smi prints ``Card Series`` and
``vram Total Memory (MiB)`` with ``DCU use (%)``. Each field below lists every spelling, newest
first, with the unit it implies, so a rename costs a table row rather than a new parser. The card
key is ``card0`` (or ``card:0``); a top-level ``system`` object carries the driver version.
``--showbus`` adds each card's ``PCI Bus`` (``0000:05:00.0``, on some drivers followed by
``--> SN: ... --> OAM ID: N``: public code reading hy-smi's JSON shows both, one of them
combining ``--showbus`` with other ``--show*`` flags in one ``--json`` call as here), kept in
``HySmiProbe.bus_ids`` so that the agent finds the card's render node by its address
(``agent/card_holders.py``) rather than by the index rule.

Per-process device memory comes from ``hy-smi --showpids`` (no JSON form): after ``PIDs for KFD
processes:``, one ``PID: N`` block per process with indented fields, of which ``HCU Index``
(the card indices it holds, ``['2']``) and ``VRAM USED(MiB)`` are read; ``No KFD PIDs currently
running`` when there is none. The figure is the process's total over its cards, as rocm-smi's
``VRAM USED`` is, so a process on several cards cannot be split per card: it is left out (a
multi-card job is not watched on Hygon) rather than charged to each card, which could stop it
for memory it does not use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
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
    render_node,
)
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "hygon"
TOOL = "hy-smi"
ARGV = (
    TOOL,
    "--showproductname",
    "--showmeminfo",
    "vram",
    "--showuse",
    "--showpower",
    "--showtemp",
    "--showuniqueid",
    "--showbus",
    "--showdriverversion",
    "--json",
)
ARGV_NO_BUS = tuple(a for a in ARGV if a != "--showbus")
"""The same query without ``--showbus``: asked when a hy-smi that does not know that flag fails
the whole query, so such a host keeps its cards (their render nodes by the index rule)."""
_COMMAND = " ".join(ARGV)
PIDS_ARGV = (TOOL, "--showpids")
_PIDS_COMMAND = " ".join(PIDS_ARGV)
_MIB = 1024 * 1024
_CARD = re.compile(r"^card:?(\d+)$")
_PID = re.compile(r"^\s*PID:\s*(\S*)\s*$")
_CARD_INDEX = re.compile(r"'(\d+)'")
_NO_PIDS = "no kfd pids currently running"

_MODEL_KEYS = ("Card Series", "Card series", "Card SKU")
# (key, bytes per unit): new hy-smi prints MiB, the older rocm-smi-style output bytes.
_MEM_TOTAL_KEYS = (("vram Total Memory (MiB)", _MIB), ("VRAM Total Memory (B)", 1))
_MEM_USED_KEYS = (("vram Total Used Memory (MiB)", _MIB), ("VRAM Total Used Memory (B)", 1))
_UTIL_KEYS = ("DCU use (%)", "GPU use (%)")
_POWER_KEYS = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
_TEMP_KEYS = ("Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)")
_UUID_KEYS = ("Unique ID", "Unique Id")
_DRIVER_KEYS = ("Driver version", "Driver Version")
_BUS_KEYS = ("PCI Bus",)
_BUS = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


def _parse_error(detail: str) -> ProbeError:
    return ProbeError(VENDOR, _COMMAND, ProbeFailure.PARSE, detail)


def _first(fields: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = fields.get(key)
        if value is not None and str(value).strip() not in {"", "N/A", "NA"}:
            return str(value).strip()
    return None


def _float(fields: Mapping[str, object], keys: tuple[str, ...]) -> float | None:
    value = _first(fields, keys)
    try:
        return float(value.rstrip("%WC ")) if value is not None else None
    except ValueError:
        return None


def _mib(fields: Mapping[str, object], keys: tuple[tuple[str, int], ...]) -> int | None:
    for key, unit in keys:
        value = _first(fields, (key,))
        if value is not None:
            try:
                return int(value) * unit // _MIB
            except ValueError:
                raise _parse_error(f"{key}: expected an integer, got {value!r}") from None
    return None


def parse_hy_smi_json(text: str) -> list[DeviceInfo]:
    """DCUs in card order; [] for empty output or ``{}``.

    Raises ProbeError(PARSE) for text that is not a JSON object, or a card without a model name
    or total memory under any known key.
    """
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _parse_error(f"expected a JSON object keyed by 'cardN': {exc.msg}") from None
    if not isinstance(data, dict):
        raise _parse_error("expected a JSON object keyed by 'cardN'")
    system = data.get("system")
    driver = _first(system, _DRIVER_KEYS) if isinstance(system, dict) else None
    cards = sorted(
        (int(match.group(1)), fields)
        for key, fields in data.items()
        if (match := _CARD.match(key)) and isinstance(fields, dict)
    )
    return [_device(index, fields, driver) for index, fields in cards]


def _device(index: int, fields: Mapping[str, object], driver: str | None) -> DeviceInfo:
    model = _first(fields, _MODEL_KEYS)
    if model is None:
        raise _parse_error(f"card{index}: expected one of {', '.join(_MODEL_KEYS)}")
    total = _mib(fields, _MEM_TOTAL_KEYS)
    if total is None:
        names = ", ".join(key for key, _ in _MEM_TOTAL_KEYS)
        raise _parse_error(f"card{index}: expected one of {names}")
    return DeviceInfo(
        vendor=VENDOR,
        model=model,
        uuid=_first(fields, _UUID_KEYS) or f"hygon-card{index}",
        index=index,
        memory_total_mib=total,
        canonical_model=canonical(model, VENDOR),
        memory_used_mib=_mib(fields, _MEM_USED_KEYS),
        utilization_pct=_float(fields, _UTIL_KEYS),
        power_watts=_float(fields, _POWER_KEYS),
        temperature_c=_float(fields, _TEMP_KEYS),
        driver_version=driver,
        health=Health.UNKNOWN,  # no public source shows hy-smi --healthcheck's output
    )


def parse_hy_smi_buses(text: str) -> dict[int, str]:
    """Each card's PCI bus id (lower case) in the same JSON, by card index; a card without a
    readable ``PCI Bus`` is left out (its render node then falls back to the index rule)."""
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {}
    out: dict[int, str] = {}
    for key, fields in data.items() if isinstance(data, dict) else ():
        card = _CARD.match(key)
        value = _first(fields, _BUS_KEYS) if card and isinstance(fields, dict) else None
        found = _BUS.search(value) if value is not None else None
        if card is not None and found is not None:
            out[int(card.group(1))] = found.group(0).lower()
    return out


@dataclass(frozen=True, slots=True)
class DcuProcess:
    """One ``PID:`` block of ``hy-smi --showpids``: the cards it holds and its VRAM, MiB."""

    pid: int
    cards: tuple[int, ...]
    vram_mib: int


def parse_hy_smi_pids(text: str, skipped: list[str] | None = None) -> list[DcuProcess]:
    """The processes of ``hy-smi --showpids``; [] when none runs.

    Raises ProbeError(PARSE) when the text is neither the process list nor the "none" line. A
    block that lacks a numeric ``PID``, its ``HCU Index`` or a numeric ``VRAM USED(MiB)`` is
    left out, with why appended to ``skipped``: a misread charges no one, and a block a job
    garbled through its own name costs only that block, not the list.
    """
    if _NO_PIDS in text.lower():
        return []
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        pid = _PID.match(line)
        if pid is not None:
            blocks.append({"PID": pid.group(1)})
            continue
        key, sep, value = line.partition(":")
        if sep and blocks and line[:1].isspace():
            blocks[-1][key.strip()] = value.strip()
    if not blocks:
        if "pids for kfd processes" in text.lower():
            return []
        raise ProbeError(
            VENDOR,
            _PIDS_COMMAND,
            ProbeFailure.PARSE,
            "expected 'PIDs for KFD processes:' with 'PID: N' blocks, or 'No KFD PIDs'",
        )
    dropped = skipped if skipped is not None else []
    out: list[DcuProcess] = []
    for block in blocks:
        vram = block.get("VRAM USED(MiB)", "")
        if not block["PID"].isdigit() or "HCU Index" not in block or not vram.isdigit():
            dropped.append(
                "expected a 'PID: N' block with 'HCU Index' and a numeric 'VRAM USED(MiB)', "
                f"got {dict(block)!r}"
            )
            continue
        cards = tuple(int(i) for i in _CARD_INDEX.findall(block["HCU Index"]))
        out.append(DcuProcess(pid=int(block["PID"]), cards=cards, vram_mib=int(vram)))
    return out


class HySmiProbe:
    """Hygon DCUs via one ``hy-smi ... --json`` call."""

    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # rows a process name can forge: agent/card_holders.py

    def __init__(self) -> None:
        self._uuids: dict[int, str] = {}  # card index -> UUID, from the last discover
        self.bus_ids: dict[str, str] = {}  # UUID -> PCI bus id, from the last discover
        self.rows_skipped: list[str] = []  # the last process list's blocks left out, and why

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: tool missing, permission, timeout, tool failed, parse."""
        try:
            text = run_tool(VENDOR, ARGV)
        except ProbeError as exc:
            if exc.kind is not ProbeFailure.TOOL_FAILED:
                raise
            text = run_tool(VENDOR, ARGV_NO_BUS)  # an older hy-smi without --showbus
        devices = parse_hy_smi_json(text)
        self._uuids = {d.index: d.uuid for d in devices}
        buses = parse_hy_smi_buses(text)
        self.bus_ids = {d.uuid: buses[d.index] for d in devices if d.index in buses}
        return devices

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per card UUID (every card, ``{}`` when
        idle), for the agent's watch on shares, as NVML's. Processes on several cards are left
        out (module docstring); a block that cannot be read, or names a card index discover
        does not know, is left out and said in ``rows_skipped``."""
        self.rows_skipped = []
        processes = parse_hy_smi_pids(run_tool(VENDOR, PIDS_ARGV), self.rows_skipped)
        if not self._uuids or any(c not in self._uuids for p in processes for c in p.cards):
            self.discover()
        charged = PrintedRows(self._uuids.values(), self.rows_skipped)
        for proc in processes:
            unknown = [c for c in proc.cards if c not in self._uuids]
            if unknown:
                self.rows_skipped.append(
                    f"process {proc.pid} holds card(s) {unknown}, which hy-smi does not list"
                )
                continue
            if len(proc.cards) == 1:
                charged.add(self._uuids[proc.cards[0]], proc.pid, proc.vram_mib)
            else:  # one total over its cards: not charged, but listed on each
                for card in proc.cards:
                    charged.listed(self._uuids[card], proc.pid)
        return charged.usage


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Hygon DCU: AMD's ``/dev/kfd`` and render node per card, plus Hygon's ``/dev/mkfd``, and the
    ``/opt/hyhal`` runtime mounted read-only: what Hygon's documented container start passes
    (``--device=/dev/kfd --device=/dev/mkfd --device=/dev/dri -v /opt/hyhal:/opt/hyhal``, e.g. the
    DCU exporter's and SourceFind's DCU images' run commands).
    """
    return DeviceNodes(
        required=("kfd", "mkfd", *(render_node(i) for i in indices)), mounts=("/opt/hyhal",)
    )
