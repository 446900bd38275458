"""Which device nodes a replica gets, by vendor: the sandbox binds them, a container is given them.

Each vendor's ``device_nodes(indices)`` sits next to its probe (it knows the vendor's node names as
the probe knows its tool); this module only picks the function by vendor key and turns names into
host paths under a device root (``/dev``, or another tree: an agent in a container, a test). It
knows nothing of the server: a granted device is anything with ``vendor``, ``index`` and ``uuid``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from xpupool.probes import (
    amd_smi,
    cnmon,
    enflame_efml,
    hy_smi,
    ixsmi,
    mthreads_gmi,
    mx_smi,
    npu_smi,
    nvml,
    xpu_smi,
)
from xpupool.probes.base import DeviceNodes
from xpupool.probes.container_runtime import ContainerRuntime

DEVICE_NODES: dict[str, Callable[[Sequence[int]], DeviceNodes]] = {
    "nvidia": nvml.device_nodes,
    "amd": amd_smi.device_nodes,
    "hygon": hy_smi.device_nodes,
    "huawei": npu_smi.device_nodes,
    "cambricon": cnmon.device_nodes,
    "mthreads": mthreads_gmi.device_nodes,
    "iluvatar": ixsmi.device_nodes,
    "metax": mx_smi.device_nodes,
    "enflame": enflame_efml.device_nodes,
    "kunlunxin": xpu_smi.kunlunxin_device_nodes,
    "intel": xpu_smi.intel_device_nodes,
}

DEV = Path("/dev")


class Granted(Protocol):
    """One granted device, as the agent's work carries it (``DeviceAssignment``)."""

    @property
    def vendor(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...


@dataclass(frozen=True, slots=True)
class NodeBind:
    """One device node: ``host`` (under the device root) appears at ``target`` (under /dev)."""

    host: Path
    target: Path


def by_vendor(devices: Iterable[Granted]) -> dict[str, list[Granted]]:
    """Devices grouped by vendor, in grant order (an unknown vendor is kept: it gets no nodes)."""
    out: dict[str, list[Granted]] = {}
    for d in devices:
        out.setdefault(d.vendor, []).append(d)
    return out


def vendor_nodes(
    vendor: str, devices: Sequence[Granted], nvidia_gpus: Path = nvml.NVIDIA_GPUS
) -> DeviceNodes:
    """The vendor's nodes for these devices; none for a vendor without a function. An NVIDIA
    card's node is named by the driver's minor for its UUID where the driver says it (it is not
    always the index: a sandbox given ``/dev/nvidia<index>`` could hold another tenant's card)."""
    make = DEVICE_NODES.get(vendor)
    if make is None:
        return DeviceNodes(required=())
    if vendor == "nvidia":
        minors = nvml.nvidia_minors(nvidia_gpus)
        return make([minors.get(d.uuid, d.index) for d in devices])
    return make([d.index for d in devices])


def sandbox_nodes(
    devices: Iterable[Granted], root: Path = DEV, nvidia_gpus: Path = nvml.NVIDIA_GPUS
) -> list[NodeBind]:
    """The nodes a sandbox binds: every required and optional node present under ``root``, in a
    stable order without repeats. An absent required node is left out (a sandbox cannot create
    it); the job then finds no card, as it would on the host."""
    out: dict[Path, NodeBind] = {}
    for vendor, granted in by_vendor(devices).items():
        nodes = vendor_nodes(vendor, granted, nvidia_gpus)
        for name in (*nodes.required, *nodes.optional):
            host = root / name
            if host.exists() and host not in out:
                out[host] = NodeBind(host, DEV / name)
    return list(out.values())


def container_device_args(
    devices: Iterable[Granted],
    runtime: ContainerRuntime,
    root: Path = DEV,
    host_root: Path = Path("/"),
) -> list[str]:
    """The ``docker run``/``podman run`` arguments that give a container exactly these devices.

    NVIDIA goes through the NVIDIA toolkit (:func:`xpupool.probes.nvml.container_devices`: CDI or
    ``--gpus``), which also mounts the driver's libraries. Every other vendor: ``--device
    HOST:/dev/NAME`` for each required node (absent or not: a missing node is the runtime's clear
    error) and each optional node present, then ``-v PATH:PATH:ro`` for each of the vendor's mounts
    present under ``host_root``."""
    args: list[str] = []
    seen: set[str] = set()
    for vendor, granted in by_vendor(devices).items():
        if vendor == "nvidia":
            args += nvml.container_devices([d.uuid for d in granted], runtime)
            continue
        nodes = vendor_nodes(vendor, granted)
        present = [n for n in nodes.optional if (root / n).exists()]
        for name in (*nodes.required, *present):
            if name not in seen:
                seen.add(name)
                args += ["--device", f"{root / name}:{DEV / name}"]
        for mount in nodes.mounts:
            if mount not in seen and (host_root / mount.lstrip("/")).exists():
                seen.add(mount)
                args += ["-v", f"{mount}:{mount}:ro"]
    return args
