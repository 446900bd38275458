"""Which processes a vendor tool's row may charge to a card: those holding the card's node open.

Vendor tools print each process's name as the process set it, raw; a name with a newline in it
can end its own row early and print a row of its choosing after it, naming any PID, any card and
any figure. The share watch stops replicas on these rows, so a row of such a tool (a probe with
``prints_names``: npu-smi, cnmon, hy-smi, xpu-smi; and the libraries of Iluvatar, Enflame and
MetaX, whose rows rest on a device index or address unverified on hardware) is charged only
when the process it names holds the card's own device node open (an entry of ``/proc/PID/fd`` whose
``st_rdev`` is the node's): a forged row can then charge only a process that really uses that
card. A row that fails is ignored and logged, never acted on. NVML and amdsmi are libraries: the
driver gives each PID and figure and no name is printed, so their rows are charged as reported
(checking them would add nothing but a way out: a process whose descriptors are too many to
check).

The node of a card is the per-card part of its vendor's node list (``probes/device_nodes.py``:
the nodes of that one card less the control nodes every card shares, such as ``/dev/nvidiactl``
or ``/dev/kfd``). An NVIDIA card's ``/dev/nvidia<minor>`` takes its minor from the driver's
``/proc/driver/nvidia/gpus/<bus id>/information`` (its ``GPU UUID:`` and ``Device Minor:``
lines, printed by nv-procfs.c in NVIDIA's open kernel modules): the minor is not always the NVML
index. A DRM render node (AMD, Hygon, Intel, Moore Threads, MetaX) is found by the
card's PCI bus id through ``/sys/class/drm/renderD*/device`` where the card's UUID carries one
or its probe read one (``bus_ids``: amdsmi's ``amdsmi_get_gpu_device_bdf``, hy-smi's
``--showbus``), else by the index rule of :func:`xpupool.probes.base.render_node`. A vendor without a per-card
node keeps the rule without proof (the rows are charged as printed), with a warning.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from xpupool.probes.base import DeviceInfo
from xpupool.probes.device_nodes import DEV, DEVICE_NODES
from xpupool.probes.nvml import NVIDIA_GPUS, nvidia_minors

SYS_DRM = Path("/sys/class/drm")
MOST_DESCRIPTORS = 4096  # a process with more open files is not checked (its rows are dropped)
PASS_DESCRIPTORS = 16384  # descriptors one pass checks at most for one replica's processes
_BUS_ID = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")


def per_card_names(vendor: str, index: int) -> tuple[str, ...] | None:
    """The names under /dev that only card ``index`` of ``vendor`` has; None: none known."""
    make = DEVICE_NODES.get(vendor)
    if make is None:
        return None
    shared = {*make([]).required, *make([]).optional}
    own = make([index])
    names = tuple(n for n in (*own.required, *own.optional) if n not in shared)
    return names or None


def render_node_by_bus(bus_id: str, sys_drm: Path = SYS_DRM) -> str | None:
    """``dri/renderD<N>`` of the card at PCI ``bus_id`` (``0000:c1:00.0``), read from sysfs:
    each ``renderD*`` entry's ``device`` link ends in its card's bus id. None: not found."""
    try:
        entries = sorted(p for p in sys_drm.iterdir() if p.name.startswith("renderD"))
    except OSError:
        return None
    for entry in entries:
        try:
            target = os.path.realpath(entry / "device")
        except OSError:
            continue
        if os.path.basename(target).lower() == bus_id.lower():
            return f"dri/{entry.name}"
    return None


def card_nodes(
    devices: Iterable[DeviceInfo],
    root: Path = DEV,
    sys_drm: Path = SYS_DRM,
    nvidia_gpus: Path = NVIDIA_GPUS,
    bus_ids: Mapping[str, str] | None = None,
) -> dict[str, frozenset[int] | None]:
    """Each card's own nodes as ``st_rdev`` numbers: ``{uuid: rdevs}``, an empty set where none
    exists under ``root`` (no process can prove it holds the card), None where its vendor has
    no per-card node. ``bus_ids``: the PCI bus id of cards whose UUID carries none (uuid ->
    ``0000:c1:00.0``), as their probes read it."""
    out: dict[str, frozenset[int] | None] = {}
    listed = list(devices)
    minors = nvidia_minors(nvidia_gpus) if any(d.vendor == "nvidia" for d in listed) else {}
    for d in listed:
        names = per_card_names(d.vendor, minors.get(d.uuid, d.index))
        if names is None:
            out[d.uuid] = None
            continue
        found = _BUS_ID.search((bus_ids or {}).get(d.uuid, "")) or _BUS_ID.search(d.uuid)
        rdevs: set[int] = set()
        for name in names:
            if name.startswith("dri/renderD") and found is not None:
                name = render_node_by_bus(found.group(1), sys_drm) or name
            try:
                st = os.stat(root / name)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                rdevs.add(st.st_rdev)
        out[d.uuid] = frozenset(rdevs)
    return out


@dataclass(slots=True)
class Budget:
    """How many more descriptors one pass may ``stat`` (a job's many processes share it)."""

    left: int = PASS_DESCRIPTORS


def held_nodes(
    pid: int,
    proc: Path = Path("/proc"),
    most: int = MOST_DESCRIPTORS,
    budget: Budget | None = None,
) -> frozenset[int] | None:
    """The ``st_rdev`` of every character device ``pid`` holds open; None: its descriptors
    cannot be read (gone, another user's without root), number more than ``most`` or than the
    pass's ``budget`` has left (each is one ``stat`` in the agent's loop: a job must not be able
    to stall it)."""
    fd_dir = proc / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    if len(names) > most or (budget is not None and len(names) > budget.left):
        return None
    if budget is not None:
        budget.left -= len(names)
    held: set[int] = set()
    for name in names:
        try:
            st = os.stat(fd_dir / name)  # follows the link: the open file itself
        except OSError:
            continue  # closed since the listing
        if stat.S_ISCHR(st.st_mode):
            held.add(st.st_rdev)
    return frozenset(held)
