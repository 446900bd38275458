"""Why a node cannot take a request: stable codes, one text table, and kube-style counting.

Codes stay small integers in arrays until the edge (STYLE §9.2: never flatten to text and parse it
back). ``PREEMPTION_MAY_HELP`` separates reasons that freeing capacity could cure from those it cannot
(kube's Unschedulable vs UnschedulableAndUnresolvable).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Reason(IntEnum):
    FITS = 0
    NODE_UNSCHEDULABLE = 1
    INSUFFICIENT_CPU = 2
    INSUFFICIENT_MEMORY = 3
    TOO_FEW_DEVICES = 4
    DEVICE_UNHEALTHY = 5
    VENDOR_NOT_ALLOWED = 6
    MODEL_NOT_ALLOWED = 7
    UUID_NOT_ALLOWED = 8
    CARD_MEMORY = 9
    SOFTWARE_UNSUPPORTED = 10
    DRIVER_TOO_OLD = 11
    DRIVER_TOO_NEW = 12
    DRIVER_UNKNOWN = 13
    INSUFFICIENT_DEVICE_MEMORY = 14
    INSUFFICIENT_DEVICE_CORES = 15
    TOPOLOGY = 16
    OUTSIDE_ASSIGNMENT = 17
    NO_CONTAINER_RUNTIME = 18
    DEVICE_TASK_LIMIT = 19
    SITE_NOT_ALLOWED = 20
    SITE_EXCLUDED = 21
    LABEL_MISSING = 22
    NUMA = 23
    SHARE_MODE = 24
    UNTOLERATED_TAINT = 25
    PARTITIONED = 26
    PARTITION_PROFILE = 27
    # a guaranteed share fits only on the over-committed part of the cards (physical_room.py);
    # numbered apart from the run above so that a code added there meanwhile cannot alias it
    PHYSICAL_CAPACITY = 43


TEXT: dict[Reason, str] = {
    Reason.FITS: "fits",
    Reason.NODE_UNSCHEDULABLE: "node unschedulable",
    Reason.INSUFFICIENT_CPU: "insufficient cpu",
    Reason.INSUFFICIENT_MEMORY: "insufficient memory",
    Reason.TOO_FEW_DEVICES: "too few devices",
    Reason.DEVICE_UNHEALTHY: "devices unhealthy or cordoned",
    Reason.VENDOR_NOT_ALLOWED: "vendor not allowed",
    Reason.MODEL_NOT_ALLOWED: "model not allowed",
    Reason.UUID_NOT_ALLOWED: "device UUID not allowed",
    Reason.CARD_MEMORY: "card memory out of range",
    Reason.SOFTWARE_UNSUPPORTED: "cannot run {detail}",
    # detail: "525.85.12 too old for cuda>=12.4: needs >= 550.54.14" (filters/software.py)
    Reason.DRIVER_TOO_OLD: "driver {detail}",
    Reason.DRIVER_TOO_NEW: "driver too new for {detail}",
    Reason.DRIVER_UNKNOWN: "driver version unknown for {detail}",
    Reason.INSUFFICIENT_DEVICE_MEMORY: "insufficient device memory",
    Reason.INSUFFICIENT_DEVICE_CORES: "insufficient device cores",
    Reason.TOPOLOGY: "no link group with enough free devices",
    Reason.OUTSIDE_ASSIGNMENT: "devices outside the admitted quota flavour",
    Reason.NO_CONTAINER_RUNTIME: "no container runtime",
    Reason.DEVICE_TASK_LIMIT: "devices at their task limit",
    Reason.SITE_NOT_ALLOWED: "not in site {detail}",
    Reason.SITE_EXCLUDED: "in excluded site {detail}",
    Reason.LABEL_MISSING: "label {detail} not on node",
    Reason.NUMA: "no NUMA node with enough free devices",
    Reason.SHARE_MODE: "devices shared in another mode",
    # detail: the taint, "gpu=true:NoSchedule" (filters/node_taints.py)
    Reason.UNTOLERATED_TAINT: "untolerated taint {detail}",
    Reason.PARTITIONED: "devices are hardware partitions",
    Reason.PARTITION_PROFILE: "no partition of the asked profile",
    Reason.PHYSICAL_CAPACITY: "only over-committed device capacity left (qos guaranteed)",
}

PREEMPTION_MAY_HELP: frozenset[Reason] = frozenset(
    {
        Reason.INSUFFICIENT_CPU,
        Reason.INSUFFICIENT_MEMORY,
        Reason.INSUFFICIENT_DEVICE_MEMORY,
        Reason.INSUFFICIENT_DEVICE_CORES,
        Reason.DEVICE_TASK_LIMIT,
        Reason.TOPOLOGY,
        Reason.NUMA,
        Reason.PHYSICAL_CAPACITY,
    }
)


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """``count`` nodes rejected for ``reason``; ``detail`` fills the text (the software need)."""

    reason: Reason
    count: int
    detail: str = ""

    @property
    def text(self) -> str:
        return TEXT[self.reason].format(detail=self.detail)


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A request (or one gang replica) that fits nowhere, with per-reason node counts."""

    total_nodes: int
    reasons: tuple[ReasonCount, ...]
    replica: int = 0
    note: str = ""

    @property
    def preemption_may_help(self) -> bool:
        """True when some node was rejected only for capacity that preemption could free."""
        return any(r.reason in PREEMPTION_MAY_HELP for r in self.reasons)

    @property
    def message(self) -> str:
        parts = ", ".join(f"{r.count} {r.text}" for r in self.reasons)
        head = f"0/{self.total_nodes} nodes fit"
        text = f"{head}: {parts}" if parts else head
        return f"{text} ({self.note})" if self.note else text

    def __str__(self) -> str:
        return self.message
