"""The node agent: register the node, heartbeat, report device metrics, run and stop the work the
server hands it (``xpupool agent``, or in-process inside ``xpupool up``). See docs/agent.md.

The names below are imported on first use: a replica's supervisor
(``python -m xpupool.agent.supervisor``) is started once per replica and needs none of them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xpupool.agent.agent import Agent, HostedNode
    from xpupool.agent.env import device_env, hami_limits
    from xpupool.agent.monitor import Monitor, over_limit
    from xpupool.agent.runner import Runner
    from xpupool.agent.transport import HttpTransport, Transport, TransportError

_WHERE = {
    "Agent": "agent",
    "HostedNode": "agent",
    "device_env": "env",
    "hami_limits": "env",
    "Monitor": "monitor",
    "over_limit": "monitor",
    "Runner": "runner",
    "HttpTransport": "transport",
    "Transport": "transport",
    "TransportError": "transport",
}

__all__ = [
    "Agent",
    "HostedNode",
    "HttpTransport",
    "Monitor",
    "Runner",
    "Transport",
    "TransportError",
    "device_env",
    "hami_limits",
    "over_limit",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'xpupool.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(f"xpupool.agent.{module}"), name)
