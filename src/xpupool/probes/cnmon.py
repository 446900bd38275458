"""Cambricon MLU probe: parse ``cnmon info``, one ``Card N`` section per card.

``cnmon info`` prints ``Key : value`` lines; a key with an empty value (``Physical Memory Usage :``)
opens a group whose more-indented lines are its members (``Total : 49152 MiB``). We flatten those
into ``Group/Key`` so ``Physical Memory Usage/Total`` and ``Virtual Memory Usage/Total`` cannot be
confused. Values carry their unit (``MiB``, ``%``, ``W``, ``C``); we read the leading number.

cnmon 5 prints more per card (the layout a public cnmon parser reads, tests/fixtures/probes/README.md):
a ``Health State`` group whose ``Device`` line says ``Good`` on a working card, and a ``Processes``
group listing each process (``Process : N`` with ``PID``, ``cmdline`` and ``MLU Memory Usage``
under it). The health word is read as NVML's path reads an unknown fault: anything but ``Good`` is
unhealthy, with a cause of kind ``other`` (probes/health_causes.py). The process list feeds the
agent's watch on shares (``process_memory``), from the same ``cnmon info`` call. ``cmdline``
is the process's own text: whether cnmon escapes a newline in it is not known (no capture shows
one), and a raw one could forge a process block naming another PID; a process's device nodes
(``/proc/PID/fd``) are not checked against the card it is charged on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
)
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "cambricon"
TOOL = "cnmon"
ARGV = (TOOL, "info")
_COMMAND = " ".join(ARGV)
_CARD = re.compile(r"^\s*Card\s*:?\s*(\d+)\s*$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")
_NO_DEVICE = ("no mlu", "no device")

_MEM_TOTAL = "Physical Memory Usage/Total"
_MEM_USED = "Physical Memory Usage/Used"
_HEALTH = "Health State/Device"
_HEALTHY_WORDS = frozenset({"good"})


def _parse_error(detail: str) -> ProbeError:
    return ProbeError(VENDOR, _COMMAND, ProbeFailure.PARSE, detail)


def parse_cnmon_info(text: str) -> dict[int, dict[str, str]]:
    """Fields per card index, keys flattened to ``Group/Key``; {} when no card is listed.

    Raises ProbeError(PARSE) when there is text but no ``Card N`` line, or a field line comes
    before the first card.
    """
    if not text.strip() or any(marker in text.lower() for marker in _NO_DEVICE):
        return {}
    cards: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    group: tuple[str, int] | None = None  # (name, indent) of the open group
    for line in text.splitlines():
        card = _CARD.match(line)
        if card is not None:
            current = cards.setdefault(int(card.group(1)), {})
            group = None
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            continue
        if current is None:
            raise _parse_error(f"expected a 'Card N' line before {line.strip()!r}")
        indent = len(key) - len(key.lstrip())
        if group is not None and indent <= group[1]:
            group = None
        name = key.strip() if group is None else f"{group[0]}/{key.strip()}"
        if value.strip():
            current[name] = value.strip()
        else:
            group = (name, indent)
    if not cards:
        raise _parse_error("expected 'Card N' sections")
    return cards


def _number(fields: Mapping[str, str], key: str) -> float | None:
    match = _NUMBER.match(fields.get(key, ""))
    return float(match.group(0)) if match else None


def _device(index: int, fields: Mapping[str, str]) -> DeviceInfo:
    model = fields.get("Product Name") or fields.get("Model")
    if not model:
        raise _parse_error(f"card {index}: expected 'Product Name'")
    total = _number(fields, _MEM_TOTAL)
    if total is None:
        raise _parse_error(f"card {index}: expected '{_MEM_TOTAL}' in MiB")
    used = _number(fields, _MEM_USED)
    health, detail = _health(fields)
    return DeviceInfo(
        vendor=VENDOR,
        model=model,
        uuid=fields.get("UUID") or f"cambricon-card{index}",
        index=index,
        memory_total_mib=int(total),
        canonical_model=canonical(model, VENDOR),
        memory_used_mib=int(used) if used is not None else None,
        utilization_pct=_number(fields, "Utilization/MLU Average"),
        power_watts=_number(fields, "Power/Usage"),
        temperature_c=_number(fields, "Temperature/Board"),
        driver_version=fields.get("Driver"),
        health=health,
        health_detail=detail,
    )


def _health(fields: Mapping[str, str]) -> tuple[Health, str]:
    """``Health State`` / ``Device``: Good is healthy, any other word unhealthy (kind
    ``other``); no such line (older cnmon) is unknown, as before."""
    word = fields.get(_HEALTH, "").strip()
    if not word:
        return Health.UNKNOWN, ""
    if word.lower() in _HEALTHY_WORDS:
        return Health.HEALTHY, ""
    return Health.UNHEALTHY, f"cnmon health: Device {word}"


def parse_cnmon_processes(text: str, skipped: list[str] | None = None) -> dict[int, dict[int, int]]:
    """Device memory in MiB per process, per card index: ``{card: {pid: mib}}``. A card whose
    ``Processes`` group is present and empty maps to ``{}``; a card without the group (cnmon
    before 5) is absent, because nothing can be told about it.

    A process without a numeric ``PID`` or ``MLU Memory Usage`` with a known unit is left out,
    with why appended to ``skipped``: a misread charges no one, and costs no other process.
    """
    usage: dict[int, dict[int, int]] = {}
    card: int | None = None
    group_indent: int | None = None  # indent of this card's "Processes :" line
    current: dict[str, str] | None = None
    found: list[tuple[int, dict[str, str]]] = []
    for line in text.splitlines():
        heading = _CARD.match(line)
        if heading is not None:
            card, group_indent, current = int(heading.group(1)), None, None
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or card is None:
            continue
        indent = len(key) - len(key.lstrip())
        if group_indent is not None and indent <= group_indent:
            group_indent, current = None, None
        if key.strip() == "Processes" and not value.strip():
            group_indent = indent
            usage.setdefault(card, {})
            continue
        if group_indent is None:
            continue
        if key.strip() == "Process":
            current = {}
            found.append((card, current))
        elif current is not None:
            current[key.strip()] = value.strip()
    dropped = skipped if skipped is not None else []
    charged = PrintedRows(usage, dropped)
    for index, proc in found:
        pid, mib = proc.get("PID", ""), _mib(proc.get("MLU Memory Usage", ""))
        if not pid.isdigit() or mib is None:
            dropped.append(
                f"card {index}: expected a process with a numeric 'PID' and "
                f"'MLU Memory Usage' in MiB, got {proc!r}"
            )
            continue
        charged.add(index, int(pid), mib)
    return charged.usage


def _mib(value: str) -> int | None:
    parts = value.split()
    if (
        len(parts) != 2
        or parts[1].lower() not in MIB_PER_UNIT
        or _NUMBER.fullmatch(parts[0]) is None
    ):
        return None
    return int(float(parts[0]) * MIB_PER_UNIT[parts[1].lower()])


def parse_cnmon(text: str) -> list[DeviceInfo]:
    """DeviceInfo per card of ``cnmon info``, in card order; raises ProbeError(PARSE)."""
    return [_device(index, fields) for index, fields in sorted(parse_cnmon_info(text).items())]


class CnmonProbe:
    """Cambricon MLUs via ``cnmon info``."""

    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # rows a process name can forge: agent/card_holders.py

    def __init__(self) -> None:
        self.rows_skipped: list[str] = []  # the last process list's entries left out, and why

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: tool missing, permission, timeout, tool failed, parse."""
        return parse_cnmon(run_tool(VENDOR, ARGV))

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per card UUID, for the agent's watch on
        shares, as NVML's; cards whose ``cnmon info`` lists no ``Processes`` group are left out.
        Raises ProbeError (the monitor logs it and measures nothing this pass) when no card has
        one: this cnmon cannot tell, which is not "nothing runs". A process that cannot be read
        is left out and said in ``rows_skipped``."""
        text = run_tool(VENDOR, ARGV)
        uuids = {d.index: d.uuid for d in parse_cnmon(text)}
        self.rows_skipped = []
        per_card = parse_cnmon_processes(text, self.rows_skipped)
        if uuids and not per_card:
            raise _parse_error("no 'Processes' group in any card: per-process memory not printed")
        return {uuids[index]: procs for index, procs in per_card.items() if index in uuids}


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Cambricon MLU: ``/dev/cambricon_dev<N>`` per card and ``/dev/cambricon_ctl``; the per-card
    IPC node ``cambricon_ipcm<N>`` only some driver builds create (Cambricon's device plugin,
    ``device-plugin/pkg/mlu/const.go``: ``/dev/cambricon_dev%d``, ``/dev/cambricon_ipcm%d``;
    Cambricon's model-zoo run scripts pass ``--device /dev/cambricon_dev0 --device
    /dev/cambricon_ctl``). ``cnmon`` is mounted where installed, as those scripts do.
    """
    return DeviceNodes(
        required=(*(f"cambricon_dev{i}" for i in indices), "cambricon_ctl"),
        optional=tuple(f"cambricon_ipcm{i}" for i in indices),
        mounts=("/usr/bin/cnmon",),
    )
