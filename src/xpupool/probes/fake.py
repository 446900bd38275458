"""``fake``: devices described in a YAML file, a real :class:`Probe` for demos, tests and laptops.

    devices:
      - vendor: nvidia
        model: NVIDIA A100-SXM4-80GB
        count: 8               # this many identical devices (default 1)
        memory: 80Gi
        driver: 550.54.15
        runtimes: {cuda: "12.4"}
        link_group_size: 4     # devices per NVLink/HCCS domain (omit: PCIe only)
        uuid_prefix: GPU-a100  # UUIDs are <prefix>-<index> (default: <vendor>-<model>)
        healthy: false         # default true; with health_cause: why ("xid-79: fell off the bus")
        utilization: 3         # percent, as a probe reads it (default: not read); the file is
                               # read each period, so a test can change it while jobs run
        partitions: [3g.40gb@0, 3g.40gb@4]  # optional: each card cut into these hardware
                               # partitions (MIG profile@first memory slice; a vNPU template
                               # alone), reported as devices of their own in the card's place

A layout the card's model cannot hold (a profile it lacks, a start outside the vendor's placement
table, overlapping instances) is refused by the catalog's geometry (``catalog/partition_cards.py``).
Bad entries raise RequestError naming ``devices[i].<field>`` from :func:`parse_fake`, and a
ProbeError (``parse``, the same words) from :meth:`FakeProbe.discover`, so that an agent reading
the file each period logs it and carries on, as with a vendor tool's bad output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import yaml

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card, read_layout
from xpupool.catalog.partition_geometry import Layout
from xpupool.model.errors import RequestError
from xpupool.model.quantity import parse_memory_mib
from xpupool.model.vendor import vendor_key
from xpupool.probes.base import DeviceInfo, Health, ProbeError, ProbeFailure, canonical

_KEYS = {
    "vendor",
    "model",
    "count",
    "memory",
    "driver",
    "runtimes",
    "link_group_size",
    "uuid_prefix",
    "healthy",
    "health_cause",
    "compute_units",
    "partitions",
    "utilization",
}


def entries(data: object, key: str, known: set[str]) -> list[tuple[str, Mapping[str, object]]]:
    """``(path, entry)`` for each mapping in ``data[key]``; refuses a missing list, a non-mapping
    entry and unknown keys (strict on write), naming the path. Shared with cluster files."""
    if not isinstance(data, Mapping) or not isinstance(data.get(key), list):
        raise RequestError(key, data, f"expected a mapping with a '{key}' list")
    out = []
    for i, entry in enumerate(data[key]):
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping):
            raise RequestError(where, entry, "expected a mapping")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise RequestError(
                f"{where}.{unknown[0]}",
                entry[unknown[0]],
                f"unknown key; known: {', '.join(sorted(known))}",
            )
        out.append((where, entry))
    return out


def parse_fake(data: object) -> list[DeviceInfo]:
    """Devices from the parsed YAML document (see the module docstring)."""
    out: list[DeviceInfo] = []
    cards = 0  # a card's index counts cards, whatever partitions the ones before it hold
    for i, (where, entry) in enumerate(entries(data, "devices", _KEYS)):
        vendor = vendor_key(str(entry.get("vendor", "")), f"{where}.vendor")
        model = entry.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError(f"{where}.model", model, "a model name is required")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
            raise RequestError(f"{where}.count", count, "must be a whole number from 1 to 64")
        memory = parse_memory_mib(f"{where}.memory", entry.get("memory"))
        group_size = entry.get("link_group_size")
        if group_size is not None and (not isinstance(group_size, int) or group_size < 1):
            raise RequestError(
                f"{where}.link_group_size", group_size, "must be a whole number >= 1"
            )
        runtimes = entry.get("runtimes") or {}
        if not isinstance(runtimes, Mapping):
            raise RequestError(
                f"{where}.runtimes", runtimes, "expected a mapping such as {cuda: '12.4'}"
            )
        units = entry.get("compute_units")
        if units is not None and (
            isinstance(units, bool) or not isinstance(units, int) or units < 0
        ):
            raise RequestError(f"{where}.compute_units", units, "must be a whole number >= 0")
        prefix = str(entry.get("uuid_prefix") or f"{vendor}-{model}".replace(" ", "-"))
        util = entry.get("utilization")
        if util is not None and (
            isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100
        ):
            raise RequestError(f"{where}.utilization", util, "must be a percentage from 0 to 100")
        healthy = bool(entry.get("healthy", True))
        cause = str(entry.get("health_cause") or "")
        layout = _layout(f"{where}.partitions", entry.get("partitions"))
        for j in range(count):
            index = cards
            cards += 1
            card = DeviceInfo(
                vendor=vendor,
                model=model,
                canonical_model=canonical(model, vendor),
                uuid=f"{prefix}-{j}",
                index=index,
                memory_total_mib=memory,
                memory_used_mib=0,
                utilization_pct=None if util is None else float(util),
                compute_units=units,
                driver_version=str(entry["driver"]) if entry.get("driver") else None,
                runtimes={str(k): str(v) for k, v in runtimes.items()},
                link_group=f"link-{i}-{j // group_size}" if group_size else None,
                health=Health.HEALTHY if healthy else Health.UNHEALTHY,
                health_detail=cause,
            )
            out.extend(_cut(card, layout, f"{where}.partitions") if layout else (card,))
    return out


def _layout(path: str, data: object) -> Layout:
    """``[3g.40gb@0, vir05_1c_16g]`` -> ``(("3g.40gb", 0), ("vir05_1c_16g", None))``."""
    return () if data is None else read_layout(path, data)


def _cut(card: DeviceInfo, layout: Layout, path: str) -> list[DeviceInfo]:
    """``card``'s instances, checked against its model's geometry; each keeps the card's index
    and identity, with the instance's UUID, memory and place."""
    devices = cut_card(card.to_device(), layout, load_partitions(), load_accelerators(), path)
    return [
        replace(
            card,
            uuid=d.uuid,
            memory_total_mib=d.memory_mib,
            partition=d.partition,
            partition_of=d.partition_of,
            partition_start=d.partition_start,
        )
        for d in devices
    ]


class FakeProbe:
    vendor: ClassVar[str] = "fake"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def available(self) -> bool:
        return self.path.is_file()

    def discover(self) -> list[DeviceInfo]:
        try:
            data = yaml.safe_load(self.path.read_text())
        except OSError as exc:
            raise ProbeError(
                self.vendor, str(self.path), ProbeFailure.TOOL_MISSING, str(exc)
            ) from None
        except yaml.YAMLError as exc:
            raise ProbeError(self.vendor, str(self.path), ProbeFailure.PARSE, str(exc)) from None
        try:
            return parse_fake(data)
        except RequestError as exc:  # a probe's failure, as a tool's bad output: never fatal
            raise ProbeError(self.vendor, str(self.path), ProbeFailure.PARSE, str(exc)) from None

    def chip_of(self, uuid: str) -> tuple[int, int] | None:
        """Where the fake vendor tool (``probes/fake_tool.py``) finds card ``uuid``: its index as
        the NPU id, chip 0 (every fake card is one chip); None for a UUID the file lacks."""
        try:
            devices = self.discover()
        except ProbeError:
            return None
        found = (d for d in devices if uuid in (d.uuid, d.partition_of))
        return next(((d.index, 0) for d in found), None)
