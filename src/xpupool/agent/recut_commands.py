"""The vendor-tool command lines that re-cut one card, and the listings they need (issue 53).

Pure: what to run is decided from the card's current instances, as the tool lists them, and the
change (``catalog/partition_change.py``); running is ``agent/card_recut.py``'s. NVIDIA's
``nvidia-smi mig`` (the MIG user guide, "Getting Started with MIG"): ``-lgi`` lists GPU instances
with their ID and placement (``Start:Size``); ``-gi IDS -dci`` destroys the compute instances of
those GPU instances and ``-gi IDS -dgi`` the GPU instances; ``-cgi`` takes profile names or IDs,
each optionally with a placement (``3g.40gb:4``, the first memory slice, as NVML's
``nvmlDeviceCreateGpuInstanceWithPlacement``), and ``-C`` gives each new GPU instance its default
compute instance. Ascend's ``npu-smi`` (Atlas 300V and Huawei Cloud CCE vNPU guides):
``set -t create-vnpu -i <npu> -c <chip> -f <template>`` and ``set -t destroy-vnpu -i <npu> -c
<chip> -v <vnpu id>``; ``info -t info-vnpu`` lists the vNPUs (``probes/npu_smi_vnpu.py``).
Destroying comes first: the slices it frees are where the new instances go.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xpupool.catalog.partition_geometry import Layout
from xpupool.probes.npu_smi_vnpu import VnpuRow

NVIDIA_SMI = "nvidia-smi"
NPU_SMI = "npu-smi"
_GI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")


@dataclass(frozen=True, slots=True)
class GpuInstanceRow:
    """One row of ``nvidia-smi mig -lgi``: a GPU instance, its profile and placement."""

    gpu: int
    profile: str
    profile_id: int
    gi_id: int
    start: int
    size: int


def parse_gpu_instances(text: str) -> list[GpuInstanceRow]:
    """The GPU instances of a ``nvidia-smi mig -lgi`` answer, in printed order; [] for none."""
    rows = []
    for line in text.splitlines():
        found = _GI_ROW.match(line.strip())
        if found:
            gpu, profile, pid, gi, start, size = found.groups()
            rows.append(GpuInstanceRow(int(gpu), profile, int(pid), int(gi), int(start), int(size)))
    return rows


class RecutImpossible(Exception):  # noqa: N818 - a reason to report, not a bug
    """The listing does not hold an instance the change destroys (the card moved under us)."""


def list_gpu_instances(gpu: int) -> list[str]:
    return [NVIDIA_SMI, "mig", "-i", str(gpu), "-lgi"]


def mig_commands(
    gpu: int, listed: Sequence[GpuInstanceRow], destroy: Layout, create: Layout
) -> list[list[str]]:
    """The ``nvidia-smi mig`` command lines that destroy ``destroy`` (found in ``listed`` by
    their profile and placement) and create ``create`` on GPU ``gpu``, in order. Raises RecutImpossible when
    an instance to destroy is not listed."""
    by_place = {(r.gpu, r.profile, r.start): r.gi_id for r in listed}
    ids = []
    for name, start in destroy:
        gi = by_place.get((gpu, name, start if start is not None else -1))
        if gi is None:
            raise RecutImpossible(f"GPU {gpu} lists no GPU instance of {name} at slice {start}")
        ids.append(str(gi))
    out: list[list[str]] = []
    if ids:
        joined = ",".join(ids)
        out.append([NVIDIA_SMI, "mig", "-i", str(gpu), "-gi", joined, "-dci"])
        out.append([NVIDIA_SMI, "mig", "-i", str(gpu), "-gi", joined, "-dgi"])
    if create:
        specs = ",".join(name if start is None else f"{name}:{start}" for name, start in create)
        out.append([NVIDIA_SMI, "mig", "-i", str(gpu), "-cgi", specs, "-C"])
    return out


def list_vnpus(npu: int, chip: int) -> list[str]:
    return [NPU_SMI, "info", "-t", "info-vnpu", "-i", str(npu), "-c", str(chip)]


def vnpu_commands(
    npu: int, chip: int, listed: Sequence[VnpuRow], destroy: Layout, create: Layout
) -> list[list[str]]:
    """The ``npu-smi`` command lines that destroy ``destroy`` (vNPUs of those templates, taken
    from ``listed`` in order) and create ``create`` on chip ``chip`` of NPU ``npu``. Raises
    RecutImpossible when too few vNPUs of a template are listed."""
    spare = list(listed)
    where = ["-i", str(npu), "-c", str(chip)]
    gone: list[int] = []
    for name, _ in destroy:
        row = next((r for r in spare if r.template == name), None)
        if row is None:
            raise RecutImpossible(f"NPU {npu} chip {chip} lists no more vNPUs of {name}")
        spare.remove(row)
        gone.append(row.vnpu_id)
    out = [  # highest id first: ids stay put whatever the tool renumbers after each
        [NPU_SMI, "set", "-t", "destroy-vnpu", *where, "-v", str(v)]
        for v in sorted(gone, reverse=True)
    ]
    for name, _ in create:
        out.append([NPU_SMI, "set", "-t", "create-vnpu", *where, "-f", name])
    return out
