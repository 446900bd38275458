"""Ascend vNPUs cut on a chip, read from ``npu-smi info -t info-vnpu -i <npu> -c <chip>``.

Huawei documents this query for the chip's vNPU resources and its vNPUs (Huawei Cloud CCE "NPU
virtualization overview", and the Atlas 300V guide's ``npu-smi set -t create-vnpu -i id -c
chip_id -f vnpu_config [-v vnpu_id]``, where a vNPU id lies in ``[phy_id*16 + 100, phy_id*16 +
107]``). The listing's table names each vNPU's id and template; the probe reports every vNPU
as a device of its own in the chip's place (``DeviceInfo.partition`` = the template), with its
vNPU id as index (what ``ASCEND_VISIBLE_DEVICES`` takes to mount it) and the template's memory
from the catalog (``catalog/partitions.py``). A chip not in vNPU mode answers with an error or an
empty list: it is reported as the chip. The table's layout is read from its header row (the cells
``Vnpu ID`` and ``Template Name``), not from column positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.probes.base import DeviceInfo

_ID, _TEMPLATE = "vnpu id", "template name"


@dataclass(frozen=True, slots=True)
class VnpuRow:
    vnpu_id: int
    template: str


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_vnpu_info(text: str) -> list[VnpuRow]:
    """The vNPUs of one ``info-vnpu`` answer, in printed order; [] when it lists none."""
    rows: list[VnpuRow] = []
    columns: dict[str, int] | None = None
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = _cells(line)
        lowered = [c.lower() for c in cells]
        if _ID in lowered and _TEMPLATE in lowered:
            columns = {name: lowered.index(name) for name in (_ID, _TEMPLATE)}
            continue
        if columns is None or len(cells) <= max(columns.values()):
            continue
        vnpu_id, template = cells[columns[_ID]], cells[columns[_TEMPLATE]]
        if vnpu_id.isdigit() and template:
            rows.append(VnpuRow(int(vnpu_id), template))
    return rows


def vnpu_devices(chip: DeviceInfo, rows: list[VnpuRow], skipped: list[str]) -> list[DeviceInfo]:
    """``chip``'s vNPUs as devices; a template the catalog does not know for the chip's model is
    left out, with the reason in ``skipped`` (its memory would be a guess)."""
    scheme = load_partitions().scheme_for(chip.model, chip.vendor, load_accelerators())
    out: list[DeviceInfo] = []
    for row in rows:
        profile = scheme.profile(row.template) if scheme is not None else None
        if profile is None:
            skipped.append(f"{chip.uuid} vNPU {row.vnpu_id}: template {row.template} unknown")
            continue
        out.append(
            replace(
                chip,
                uuid=f"{chip.uuid}-vnpu{row.vnpu_id}",
                index=row.vnpu_id,
                memory_total_mib=profile.memory_mib,
                memory_used_mib=None,
                compute_units=profile.compute,
                utilization_pct=None,
                link_group=None,
                partition=row.template,
                partition_of=chip.uuid,
                partition_start=None,
            )
        )
    return out
