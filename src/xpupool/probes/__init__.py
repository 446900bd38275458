"""Vendor probes: discover the accelerators on this host, one module per vendor, one interface.

``PROBES`` lists every real probe, in the order a host is probed; the fake probe is separate
because it needs a file. Each module imports without its vendor's library or tool.
"""

from collections.abc import Callable

from xpupool.probes.amd_smi import AmdSmiProbe
from xpupool.probes.base import DeviceInfo, Health, Probe, ProbeError, ProbeFailure
from xpupool.probes.cnmon import CnmonProbe
from xpupool.probes.enflame_efml import EnflameEfmlProbe
from xpupool.probes.fake import FakeProbe
from xpupool.probes.host import Discovery, discover_host
from xpupool.probes.hy_smi import HySmiProbe
from xpupool.probes.ixsmi import IxsmiProbe
from xpupool.probes.mthreads_gmi import MthreadsGmiProbe
from xpupool.probes.mx_smi import MxSmiProbe
from xpupool.probes.npu_smi import NpuSmiProbe
from xpupool.probes.nvml import NvmlProbe
from xpupool.probes.xpu_smi import XpuSmiProbe

PROBES: tuple[Callable[[], Probe], ...] = (
    NvmlProbe,
    AmdSmiProbe,
    NpuSmiProbe,
    CnmonProbe,
    HySmiProbe,
    MthreadsGmiProbe,
    IxsmiProbe,
    MxSmiProbe,
    XpuSmiProbe,
    EnflameEfmlProbe,
)


def host_probes() -> list[Probe]:
    """A fresh instance of every real probe."""
    return [make() for make in PROBES]


__all__ = [
    "PROBES",
    "DeviceInfo",
    "Discovery",
    "FakeProbe",
    "Health",
    "Probe",
    "ProbeError",
    "ProbeFailure",
    "discover_host",
    "host_probes",
]
