"""Vendor probes: discover the accelerators on this host, one module per vendor, one interface."""

from xpupool.probes.base import DeviceInfo, Health, Probe, ProbeError, ProbeFailure

__all__ = ["DeviceInfo", "Health", "Probe", "ProbeError", "ProbeFailure"]
