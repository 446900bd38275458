"""MetaX GPUs (C500/N260) through the default ``mx-smi`` table.

``mx-smi`` prints two table lines per GPU (index/name/bus/util, then temp/power/memory/state) under
a header carrying the kernel driver and MACA versions. The table prints no UUID, so the probe names
a device ``metax-<PCI bus id>``. Note: MOFFETT also ships a tool called ``mx-smi`` with a different
table; its output has no "MX-SMI ... Kernel Mode Driver Version" header and is rejected as PARSE.

Per-process device memory (the agent's watch on shares) comes from MetaX's ``libmxsml.so``
(``probes/mxsml_procs.py``), each figure named by its card's PCI address; the rows go through
the agent's device-node check (``prints_names``: the card's render node, found by that address).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from xpupool.probes.base import (
    DeviceInfo,
    DeviceNodes,
    Health,
    ProbeError,
    ProbeFailure,
    canonical,
    render_node,
)
from xpupool.probes.mxsml_procs import read_processes
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "metax"
TOOL = "mx-smi"
ARGV: tuple[str, ...] = (TOOL,)

_HEADER = re.compile(r"MX-SMI\s+\S+\s+Kernel Mode Driver Version:\s*(?P<driver>\S+)")
_MACA = re.compile(r"MACA Version:\s*(?P<maca>\S+)")
_ROW1 = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+\S+\s*\|\s*"
    r"(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*\|\s*(?P<util>\S+)"
)
_ROW2 = re.compile(
    r"^\|\s*(?P<temp>\S+)\s+(?P<power>\S+)\s*/\s*\S+\s+\S+\s*\|\s*"
    r"(?P<used>\d+)\s*/\s*(?P<total>\d+)\s*MiB\s*\|\s*(?P<state>[^|]*?)\s*\|"
)


def parse_mx_smi(text: str) -> list[DeviceInfo]:
    """Devices in the default table; a header with no GPU rows is an empty list.

    Raises ProbeError(PARSE) when the MX-SMI header is missing or a GPU's second line is not
    ``<temp> <W> / <W> <perf> | <used>/<total> MiB | <state>``.
    """
    header = _HEADER.search(text)
    if header is None:
        raise ProbeError(
            VENDOR,
            TOOL,
            ProbeFailure.PARSE,
            "expected header 'MX-SMI <version> Kernel Mode Driver Version: <version>'",
        )
    maca = _MACA.search(text)
    runtimes = {"maca": maca["maca"]} if maca else {}
    lines = text.splitlines()
    devices: list[DeviceInfo] = []
    for number, line in enumerate(lines):
        first = _ROW1.match(line)
        if first is None:
            continue
        second = _ROW2.match(lines[number + 1]) if number + 1 < len(lines) else None
        if second is None:
            raise ProbeError(
                VENDOR,
                TOOL,
                ProbeFailure.PARSE,
                f"GPU {first['index']}: expected '<temp> <W> / <W> <perf> | <used>/<total> MiB |"
                f" <state>' after {line.strip()!r}",
            )
        model = first["name"].strip()
        state = second["state"]
        devices.append(
            DeviceInfo(
                vendor=VENDOR,
                model=model,
                canonical_model=canonical(model, VENDOR),
                uuid=f"{VENDOR}-{first['bus'].lower()}",
                index=int(first["index"]),
                memory_total_mib=int(second["total"]),
                memory_used_mib=int(second["used"]),
                utilization_pct=_number(first["util"], "%"),
                power_watts=_number(second["power"], "W"),
                temperature_c=_number(second["temp"], "C"),
                driver_version=header["driver"],
                runtimes=runtimes,
                health=_health(state),
                health_detail="" if state == "Available" else state,
            )
        )
    return devices


class MxSmiProbe:
    vendor: ClassVar[str] = VENDOR
    prints_names: ClassVar[bool] = True  # not names: unverified rows, proven by the node check

    def __init__(self, library: object | None = None) -> None:
        self.library = library  # libmxsml (a fake in tests); None: loaded when first asked

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        return parse_mx_smi(run_tool(self.vendor, ARGV))

    def process_memory(self) -> dict[str, dict[int, int]]:
        """``{uuid: {pid: MiB}}`` through libmxsml (``probes/mxsml_procs.py``); raises
        ProbeError."""
        return read_processes(self.library)


def _health(state: str) -> Health:
    """``Available`` is the only state MetaX documents as usable; an empty cell is unknown."""
    if state == "Available":
        return Health.HEALTHY
    return Health.UNKNOWN if not state else Health.UNHEALTHY


def _number(text: str, unit: str) -> float | None:
    try:
        return float(text.removesuffix(unit))
    except ValueError:
        return None  # N/A


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """MetaX: the control node ``/dev/mxcd`` and each card's DRM render node (MetaX's documented
    container start passes ``--device=/dev/dri --device=/dev/mxcd``; vLLM-MetaX quick start). Only
    the card's own render node is given, with AMD's index-to-DRM assumption.
    """
    return DeviceNodes(required=("mxcd", *(render_node(i) for i in indices)))
