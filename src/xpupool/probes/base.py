"""What a probe reports and how it fails: one record per device, one error type.

A probe only *reports*; fitting and scoring are engine code shared by every vendor, and vendor
differences are data (catalog rows). Every field a tool cannot give is None, never a made-up zero:
monitoring must be able to tell "0 W" from "unknown".
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Generic, Protocol, TypeVar

from xpupool.catalog import AcceleratorCatalog, load_accelerators
from xpupool.model.device import Device
from xpupool.model.errors import XpupoolError


class Health(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device as a vendor tool or library reports it.

    ``model`` is the name exactly as printed; ``canonical_model`` is the catalog's name for it (None
    when the catalog does not know it). ``runtimes`` maps a runtime to the highest version the driver
    serves or the installed version (``{"cuda": "12.4"}``, ``{"cann": "8.0.RC2"}``). ``link_group``
    names the fast-link domain (NVLink/HCCS/xGMI) on the host and ``peers`` lists the UUIDs this
    device reaches over it. A hardware partition (a MIG instance, a vNPU) is reported as a
    device of its own: ``partition`` its profile, ``partition_of`` its card's UUID,
    ``partition_start`` its first memory slice (MIG); the card it was cut from is then not
    reported as a device (it serves work only through its instances).
    """

    vendor: str
    model: str
    uuid: str
    index: int
    memory_total_mib: int
    canonical_model: str | None = None
    memory_used_mib: int | None = None
    compute_units: int | None = None
    utilization_pct: float | None = None
    power_watts: float | None = None
    temperature_c: float | None = None
    driver_version: str | None = None
    runtimes: Mapping[str, str] = field(default_factory=dict)
    numa_node: int | None = None
    link_group: str | None = None
    peers: tuple[str, ...] = ()
    health: Health = Health.UNKNOWN
    health_detail: str = ""
    mig_mode: bool | None = None
    partition: str | None = None
    partition_of: str | None = None
    partition_start: int | None = None

    def to_device(self) -> Device:
        """The engine's view: capacity and identity; live metrics stay with the agent."""
        return Device(
            uuid=self.uuid,
            vendor=self.vendor,
            model=self.model,
            memory_mib=self.memory_total_mib,
            index=self.index,
            compute_units=self.compute_units or 0,
            driver_version=self.driver_version,
            runtimes=dict(self.runtimes),
            numa_node=self.numa_node,
            link_group=self.link_group,
            healthy=self.health is not Health.UNHEALTHY,
            max_tasks=1 if self.partition is not None else None,
            partition=self.partition,
            partition_of=self.partition_of,
            partition_start=self.partition_start,
        )


@dataclass(frozen=True, slots=True)
class DeviceNodes:
    """What a process needs to use some of one vendor's cards, as names under ``/dev``.

    ``required``: the per-card and control nodes the vendor's stack cannot work without; a
    container is given them even when the host lacks one, so that a missing node is the runtime's
    clear error rather than a job that silently sees no card. ``optional``: nodes only some driver
    builds create, given only where present. ``mounts``: absolute host paths (driver libraries, the
    vendor tool) that the vendor's own container runtime would mount read-only next to the nodes,
    given only where present. Each vendor's function sits next to its probe (``device_nodes``);
    ``probes/device_nodes.py`` picks by vendor.
    """

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()


def render_node(index: int) -> str:
    """The DRM render node of the card a vendor tool calls ``index``: ``dri/renderD<128+index>``.

    ROCm's container guide: "/dev/dri/renderD<node>: ... <node> is a number for each card in the
    system starting from 128" (rocm.docs.amd.com, "Deploy ROCm Docker containers", docs-5.3.3).
    This assumes the tool's index order is the DRM probe order and that no other DRM driver (a
    BMC's VGA) holds a render node before the accelerators; both hold on the usual servers.
    """
    return f"dri/renderD{128 + index}"


class ProbeFailure(StrEnum):
    """Why a probe could not report, so an operator knows what to fix."""

    LIBRARY_MISSING = "library-missing"
    TOOL_MISSING = "tool-missing"
    PERMISSION = "permission"
    TIMEOUT = "timeout"
    TOOL_FAILED = "tool-failed"
    PARSE = "parse"


# MiB in one of each memory unit the vendor tools print (lower-cased; K, M, G, T as binary, as the
# tools mean them): one table for every probe that reads a size with its unit
MIB_PER_UNIT: dict[str, float] = {
    "b": 1 / (1024 * 1024),
    "kib": 1 / 1024,
    "kb": 1 / 1024,
    "mib": 1,
    "mb": 1,
    "gib": 1024,
    "gb": 1024,
    "tib": 1024 * 1024,
    "tb": 1024 * 1024,
}


CardKey = TypeVar("CardKey", bound=Hashable)


class PrintedRows(Generic[CardKey]):
    """A text tool's per-process rows as ``{card: {pid: MiB}}``, each card and PID charged once.

    The tools print each process's name raw, so a name can forge a row after its own (the share
    watch then checks the PID holds the card's node: agent/card_holders.py). A process really on
    a card is listed once per card; listed twice, one row is forged, and which cannot be told, so
    neither is charged and why goes to ``skipped``: a job cannot charge a co-tenant of its card
    with a made-up figure. (NVML and amdsmi print no names; their probes sum as the library
    reports.)
    """

    def __init__(self, cards: Iterable[CardKey], skipped: list[str]) -> None:
        self.usage: dict[CardKey, dict[int, int]] = {card: {} for card in cards}
        self.skipped = skipped
        self._twice: set[tuple[CardKey, int]] = set()
        self._uncharged: set[tuple[CardKey, int]] = set()

    def listed(self, card: CardKey, pid: int) -> None:
        """``pid`` has a row on ``card`` that is not charged (hy-smi's total over several
        cards): a second row for it there is still a forgery's mark."""
        if (card, pid) in self._uncharged or pid in self.usage.get(card, {}):
            self.add(card, pid, 0)  # the second row: neither counts
        else:
            self._uncharged.add((card, pid))

    def add(self, card: CardKey, pid: int, mib: int) -> None:
        per_pid = self.usage.setdefault(card, {})
        if (card, pid) in self._twice:
            return
        if pid in per_pid or (card, pid) in self._uncharged:
            per_pid.pop(pid, None)
            self._twice.add((card, pid))
            self.skipped.append(
                f"process {pid} is listed twice on card {card} (one row is forged): "
                "neither is charged"
            )
            return
        per_pid[pid] = mib


class ProbeError(XpupoolError):
    """A probe could not report: which vendor, which command, what kind of failure, and detail."""

    def __init__(self, vendor: str, command: str, kind: ProbeFailure, detail: str) -> None:
        self.vendor = vendor
        self.command = command
        self.kind = kind
        self.detail = detail
        super().__init__(f"{vendor} probe: {command}: {kind.value}: {detail}")


class Probe(Protocol):
    """``available`` never raises (library or tool present?); ``discover`` raises ProbeError."""

    vendor: ClassVar[str]

    def available(self) -> bool: ...

    def discover(self) -> list[DeviceInfo]: ...


def canonical(model: str, vendor: str, catalog: AcceleratorCatalog | None = None) -> str | None:
    """The catalog's canonical name for a printed model, or None."""
    found = (catalog or load_accelerators()).lookup(model, vendor)
    return found.name if found is not None else None
