"""Cambricon MLU probe: parse ``cnmon info``, one ``Card N`` section per card.

``cnmon info`` prints ``Key : value`` lines; a key with an empty value (``Physical Memory Usage :``)
opens a group whose more-indented lines are its members (``Total : 49152 MiB``). We flatten those
into ``Group/Key`` so ``Physical Memory Usage/Total`` and ``Virtual Memory Usage/Total`` cannot be
confused. Values carry their unit (``MiB``, ``%``, ``W``, ``C``); we read the leading number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xpupool.probes.base import (
    DeviceInfo,
    DeviceNodes,
    Health,
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
        health=Health.UNKNOWN,  # cnmon info prints no health verdict
    )


def parse_cnmon(text: str) -> list[DeviceInfo]:
    """DeviceInfo per card of ``cnmon info``, in card order; raises ProbeError(PARSE)."""
    return [_device(index, fields) for index, fields in sorted(parse_cnmon_info(text).items())]


class CnmonProbe:
    """Cambricon MLUs via ``cnmon info``."""

    vendor: ClassVar[str] = VENDOR

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: tool missing, permission, timeout, tool failed, parse."""
        return parse_cnmon(run_tool(VENDOR, ARGV))


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
