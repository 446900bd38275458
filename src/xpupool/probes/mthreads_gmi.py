"""Moore Threads MUSA GPU probe: parse the JSON of ``mthreads-gmi -q --json`` in one call.

No vendor reference for the format is public; it is taken from public community code that runs the
tool (also spelled ``-q -j``). The tool prints one JSON object in nvidia-smi ``-q`` style: a
top-level ``Driver Version`` (and, where installed, ``MUSA Version``) and ``GPU``, a list of
objects with ``Index`` (a string or a number), ``Product Name``, ``FB Memory Usage`` (``Total``,
``Used``), ``Utilization.Gpu``, ``Temperature."GPU Current Temp"`` and ``Power Readings``.

Known quirks handled here:

* the power key is printed as ``"Power Draw "`` with a trailing space; keys are matched after
  stripping surrounding whitespace, so both spellings (and any other padded key) are read;
* memory is printed in MiB or GiB, with or without a space before the unit (``49152MiB``,
  ``48GiB``, ``16 GiB``); a bare number is taken as MiB, ``MB``/``GB`` as MiB/GiB;
* ``N/A`` (or a missing key) means unknown and gives None, never 0.

Identity: ``GPU UUID``, else ``UUID``, else ``Serial Number``; when none is printed the id is
synthesised from the PCI bus id (``mthreads-pci-0000:3b:00.0``, stable across reboots while the
card stays in its slot), else from the index (``mthreads-<index>``, stable only while the
enumeration order is). Health is always unknown: the tool prints no health state we know of.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xpupool.probes.base import (
    MIB_PER_UNIT,
    DeviceInfo,
    DeviceNodes,
    Health,
    ProbeError,
    ProbeFailure,
    canonical,
    render_node,
)
from xpupool.probes.tool import run_tool, tool_present

VENDOR = "mthreads"
TOOL = "mthreads-gmi"
ARGV = (TOOL, "-q", "--json")
_COMMAND = " ".join(ARGV)

_ABSENT = {"", "N/A", "NA", "n/a", "[N/A]", "Not Supported", "[Not Supported]"}
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)

_UUID_KEYS = ("GPU UUID", "UUID", "Serial Number")
_BUS_ID_KEYS = ("Bus Id", "Bus ID", "BusId")
_POWER_KEYS = ("Power Draw", "Current Power Draw", "Average Power Draw")
_TEMP_KEYS = ("GPU Current Temp", "GPU Temp")


def _parse_error(detail: str) -> ProbeError:
    return ProbeError(VENDOR, _COMMAND, ProbeFailure.PARSE, detail)


def _get(fields: object, *keys: str) -> object | None:
    """The first present, non-N/A value under ``keys``, keys compared without padding."""
    if not isinstance(fields, Mapping):
        return None
    stripped: dict[str, object] = {str(key).strip(): value for key, value in fields.items()}
    for key in keys:
        value = stripped.get(key)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and value.strip() in _ABSENT:
            continue
        return value
    return None


def _text(fields: object, *keys: str) -> str | None:
    value = _get(fields, *keys)
    if value is None or isinstance(value, (Mapping, list)):
        return None
    return str(value).strip()


def _float(fields: object, *keys: str) -> float | None:
    """The leading number of a value such as ``35%``, ``45C`` or ``55.0 W``; None if unreadable."""
    value = _get(fields, *keys)
    if isinstance(value, (int, float)):
        return float(value)
    match = _NUMBER.match(value) if isinstance(value, str) else None
    return float(match.group(1)) if match else None


def _mib(where: str, fields: object, key: str) -> int | None:
    """Memory in MiB from ``49152MiB``, ``48GiB``, ``16 GiB`` or a bare number (MiB)."""
    value = _get(fields, key)
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    match = _MEMORY.match(value) if isinstance(value, str) else None
    if match is None:
        raise _parse_error(
            f"{where}: FB Memory Usage.{key}: expected a size such as '49152MiB' or '48GiB', "
            f"got {value!r}"
        )
    unit = (match.group(2) or "MiB").lower()
    return int(float(match.group(1)) * MIB_PER_UNIT[unit])


def _index(position: int, fields: Mapping[str, object]) -> int:
    value = _get(fields, "Index", "Minor Number")
    if value is None:
        return position
    try:
        return int(str(value).strip())
    except ValueError:
        raise _parse_error(f"GPU[{position}]: Index: expected an integer, got {value!r}") from None


def _uuid(index: int, fields: Mapping[str, object]) -> str:
    found = _text(fields, *_UUID_KEYS)
    if found is not None:
        return found
    bus_id = _text(_get(fields, "PCI"), *_BUS_ID_KEYS) or _text(fields, *_BUS_ID_KEYS)
    if bus_id is not None:
        return f"mthreads-pci-{_short_bus_id(bus_id)}"
    return f"mthreads-{index}"


def _short_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` -> ``0000:3b:00.0`` (the 4-digit domain Linux uses), lower case."""
    domain, sep, rest = bus_id.strip().lower().partition(":")
    if sep and len(domain) > 4 and domain.isalnum():
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


def parse_mthreads_gmi_json(text: str) -> list[DeviceInfo]:
    """GPUs in index order; [] for empty output or an empty ``GPU`` list.

    A lone GPU object in place of the list is read as a one-element list. Raises ProbeError(PARSE)
    for text that is not a JSON object, an object with no ``GPU`` list, a GPU entry that is not an
    object, has no ``Product Name`` or no readable ``FB Memory Usage.Total``, a non-integer
    ``Index``, or two GPUs with the same index.
    """
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _parse_error(
            f"expected a JSON object with a 'GPU' list: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise _parse_error(
            f"expected a JSON object with a 'GPU' list, got a JSON {type(data).__name__}"
        )
    gpus = _get(data, "GPU", "GPUs")
    if gpus is None:
        if str(_get(data, "Attached GPUs") or "").strip() == "0":
            return []
        raise _parse_error(f"expected a 'GPU' list; top-level keys: {sorted(data)}")
    if isinstance(gpus, dict):
        gpus = [gpus]
    if not isinstance(gpus, list):
        raise _parse_error(f"'GPU': expected a list of objects, got a JSON {type(gpus).__name__}")
    driver = _text(data, "Driver Version")
    musa = _text(data, "MUSA Version")
    devices: dict[int, DeviceInfo] = {}
    for position, fields in enumerate(gpus):
        if not isinstance(fields, dict):
            raise _parse_error(
                f"GPU[{position}]: expected an object, got a JSON {type(fields).__name__}"
            )
        device = _device(position, fields, driver, musa)
        if device.index in devices:
            raise _parse_error(f"GPU[{position}]: Index {device.index} listed twice")
        devices[device.index] = device
    return [devices[index] for index in sorted(devices)]


def _device(
    position: int, fields: Mapping[str, object], driver: str | None, musa: str | None
) -> DeviceInfo:
    index = _index(position, fields)
    where = f"GPU[{position}] (Index {index})"
    model = _text(fields, "Product Name")
    if model is None:
        raise _parse_error(f"{where}: expected 'Product Name'")
    memory = _get(fields, "FB Memory Usage")
    total = _mib(where, memory, "Total")
    if total is None:
        raise _parse_error(f"{where}: expected 'FB Memory Usage' with a 'Total' size")
    musa = _text(fields, "MUSA Version") or musa
    return DeviceInfo(
        vendor=VENDOR,
        model=model,
        uuid=_uuid(index, fields),
        index=index,
        memory_total_mib=total,
        canonical_model=canonical(model, VENDOR),
        memory_used_mib=_mib(where, memory, "Used"),
        utilization_pct=_float(_get(fields, "Utilization"), "Gpu", "GPU"),
        power_watts=_float(_get(fields, "Power Readings"), *_POWER_KEYS),
        temperature_c=_float(_get(fields, "Temperature"), *_TEMP_KEYS),
        driver_version=_text(fields, "Driver Version") or driver,
        runtimes={"musa": musa} if musa is not None else {},
        health=Health.UNKNOWN,  # mthreads-gmi reports no health state we know of
    )


class MthreadsGmiProbe:
    """Moore Threads GPUs via one ``mthreads-gmi -q --json`` call."""

    vendor: ClassVar[str] = VENDOR

    def available(self) -> bool:
        return tool_present(TOOL)

    def discover(self) -> list[DeviceInfo]:
        """Raises ProbeError: tool missing, permission, timeout, tool failed, parse."""
        return parse_mthreads_gmi_json(run_tool(VENDOR, ARGV))


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """Moore Threads: ``/dev/mtgpu.<N>`` per card and its DRM render node (runs without the
    mt-container-toolkit pass ``--device /dev/mtgpu.0 --device /dev/dri``; FlagOS runtime images'
    README). Only the card's own render node is given, not all of ``/dev/dri``; the index-to-DRM
    mapping is the same assumption as AMD's (:func:`~xpupool.probes.base.render_node`).
    """
    return DeviceNodes(
        required=(*(f"mtgpu.{i}" for i in indices), *(render_node(i) for i in indices)),
        mounts=("/usr/bin/mthreads-gmi",),
    )
