"""The node agent: register the node, heartbeat, report device metrics, run and stop the work the
server hands it (``xpupool agent``, or in-process inside ``xpupool up``). See docs/agent.md."""

from xpupool.agent.agent import Agent, HostedNode
from xpupool.agent.env import device_env, hami_limits
from xpupool.agent.monitor import Monitor, over_limit
from xpupool.agent.runner import Runner
from xpupool.agent.transport import HttpTransport, Transport, TransportError

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
