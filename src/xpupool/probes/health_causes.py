"""Why a card is unhealthy, as a short cause that names its kind: ``"xid-79: GPU has fallen off
the bus"``. The part before the colon (:func:`cause_key`) is what an operator lists to keep a
cause as a warning and what Prometheus counts health events by, so it must come from a small set
(a label per distinct text would grow without bound); the rest is for people.

NVIDIA's XIDs are sorted here into those that say the card itself failed and those that say an
application did something wrong on a card that is fine. The list follows NVIDIA's "XID Errors"
table (docs.nvidia.com/deploy/xid-errors, its "XID catalog" columns for a hardware, driver or
user-application cause) and the application XIDs NVIDIA's own Kubernetes device plugin skips in
its health check (NVIDIA/k8s-device-plugin, ``internal/rm/health.go``: 13, 31, 43, 45, 68). An XID
in neither table is taken as critical, as the device plugin does: an unknown fault empties the
card rather than leave jobs on it.
"""

from __future__ import annotations

import re

# Application errors on a healthy card (the device plugin's list), and XIDs NVIDIA's table says
# were corrected or contained: the job that caused them fails on its own, the card serves on.
WARNING_XIDS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    63: "ECC page retirement or row remapping recorded",  # a failure is read as remapped rows
    68: "video processor exception",
    92: "high single-bit ECC error rate",  # corrected
    94: "contained ECC error",  # the affected application is stopped; the card carries on
}

# The critical XIDs NVIDIA's table names; any other XID not in WARNING_XIDS is critical too.
CRITICAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

_KEY = re.compile(r"^([a-z0-9][a-z0-9-]{0,39}):")
_XID_KEY = re.compile(r"^xid-[0-9]{1,4}$")
KINDS = frozenset(
    {
        "ecc-uncorrectable",
        "gpu-lost",
        "row-remap-pending",
        "row-remap-failed",
        "page-retire-pending",
        "npu-warning",
        "npu-alarm",
        "npu-critical",
        "npu-unknown",
    }
)
"""The kinds a probe of this package writes, besides ``xid-N``: the cause arrives from an agent,
which may be anyone's, so a kind outside this set (or an XID past four digits) counts as
``other``: a hostile agent cannot grow the server's Prometheus labels without bound."""


def xid_cause(xid: int) -> tuple[bool, str]:
    """(critical, cause) for NVIDIA XID ``xid``: ``(True, "xid-79: GPU has fallen off the
    bus")``; an XID neither table names is critical, with its number only."""
    if xid in WARNING_XIDS:
        return False, f"xid-{xid}: {WARNING_XIDS[xid]}"
    return True, f"xid-{xid}: {CRITICAL_XIDS.get(xid, 'critical XID (not in the known list)')}"


def cause_key(cause: str) -> str:
    """The kind of ``cause``: its lower-case slug before the colon (``xid-79``), or ``other``
    for a text that names none (a vendor tool's free text)."""
    found = _KEY.match(cause)
    key = found.group(1) if found else "other"
    return key if key in KINDS or _XID_KEY.match(key) else "other"


def is_warning(cause: str, warnings: frozenset[str]) -> bool:
    """Whether the operator keeps ``cause`` as a warning: its key is listed (``xid-94``), or it
    is an XID whose number is (``94``)."""
    key = cause_key(cause)
    return key in warnings or (key.startswith("xid-") and key[4:] in warnings)
