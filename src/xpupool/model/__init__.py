"""The resource model: devices, nodes, requests, allocations, quantities and their validation."""

from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.model.errors import CatalogError, Conflict, NotFound, RequestError, XpupoolError
from xpupool.model.request import (
    WHOLE,
    DevicePolicy,
    DeviceRequest,
    Request,
    SoftwareNeed,
    Topology,
    parse_software_need,
)
from xpupool.model.version import Version, compare, parse_version

__all__ = [
    "WHOLE",
    "Allocation",
    "CatalogError",
    "Conflict",
    "Device",
    "DevicePolicy",
    "DeviceRequest",
    "DeviceShare",
    "Node",
    "NotFound",
    "Request",
    "RequestError",
    "SoftwareNeed",
    "Topology",
    "Version",
    "XpupoolError",
    "compare",
    "parse_software_need",
    "parse_version",
]
