"""What a node registers: host facts (CPU, memory, arch, OS) and the devices its probes found.

Kept apart from the loop so the registration body is a pure function of what was read; the agent
compares it with what it last registered and sends it again only when something changed.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from pydantic import ValidationError

from xpupool.model.errors import RequestError
from xpupool.probes.base import DeviceInfo
from xpupool.probes.container_runtime import RuntimeName
from xpupool.server.schemas.agent_protocol import DeviceIn, NodeIn, TaintIn

log = logging.getLogger("xpupool.agent")


def host_cpu_milli() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one), in millicores."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return count * 1000


def host_memory_mib() -> int:
    """Physical memory, MiB; 0 when the OS will not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (AttributeError, ValueError, OSError):
        return 0


def node_name(text: str | None = None) -> str:
    """A valid node name from ``text`` or the host name: lower case, other characters as '-'."""
    raw = (text or socket.gethostname() or "node").lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", raw).strip("._-")[:63].strip("._-")
    return name or "node"


def device_in(d: DeviceInfo) -> DeviceIn | None:
    """The registration form of a device; None (logged) when the probe's record cannot be one,
    e.g. a card reporting no memory."""
    try:
        device = DeviceIn.from_device(d.to_device())
        return DeviceIn.model_validate(device.model_dump())  # the bounds the server checks
    except (RequestError, ValidationError) as exc:
        reason = exc.reason if isinstance(exc, RequestError) else exc.errors()[0]["msg"]
        log.warning("device %s left out of the inventory: %s", d.uuid, reason)
        return None


def node_in(
    name: str,
    devices: Iterable[DeviceInfo],
    *,
    site: str = "default",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[TaintIn] = (),
    runtime: str | None = None,
    drain: bool = False,
) -> NodeIn:
    """This host as a registration body, with the devices the probes found and the container
    runtime the agent found (``--runtime``; None: no image jobs here), and the taints it declares
    (``--taint``: the server takes them when the node is new). ``drain``: a device that jobs
    hold and that is gone (or smaller) is cordoned and changed when they end, instead of the
    registration being refused (``server/drain.py``)."""
    found = [x for x in (device_in(d) for d in devices) if x is not None]
    return NodeIn(
        name=name,
        site=site,
        cpu_milli=host_cpu_milli(),
        memory_mib=host_memory_mib(),
        labels=dict(labels or {}),
        taints=list(taints),
        arch=platform.machine()[:40],
        os=f"{platform.system()} {platform.release()}"[:200],
        devices=found,
        runtime=cast(RuntimeName | None, runtime),  # pydantic refuses any other name
        drain=drain,
    )
