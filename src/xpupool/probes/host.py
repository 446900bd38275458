"""Run every probe that applies to this host and collect devices and failures; never crash.

A host may have several vendors' cards, or none; a missing tool or library is normal and is
reported as a failure with its reason (for the agent to log), not raised. UUIDs are unique across
probes; a device reported twice (two tools seeing one card) keeps its first report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from xpupool.probes.base import DeviceInfo, Probe, ProbeError


@dataclass(slots=True)
class Discovery:
    devices: list[DeviceInfo] = field(default_factory=list)
    failures: list[ProbeError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # probes whose library or tool is absent


def _covered(probe: Probe) -> tuple[str, ...]:
    """The vendors a probe serves: its ``covers`` when one tool serves several (``xpu-smi``:
    Kunlunxin and Intel), else its ``vendor``. Optional, so that a probe for one vendor stays
    the Protocol's two methods and a name."""
    covers: tuple[str, ...] | None = getattr(probe, "covers", None)
    return covers or (probe.vendor,)


def discover_host(probes: Iterable[Probe]) -> Discovery:
    found = Discovery()
    seen: set[str] = set()
    for probe in probes:
        if not probe.available():
            found.skipped.extend(_covered(probe))
            continue
        try:
            devices = probe.discover()
        except ProbeError as exc:
            found.failures.append(exc)
            continue
        for device in devices:
            if device.uuid not in seen:
                seen.add(device.uuid)
                found.devices.append(device)
    return found
