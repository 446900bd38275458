"""Nodes as registered (by an agent or a cluster file), with their devices and cordons.

Devices live in the node row as JSON: a node registers and changes as a whole, and the engine
rebuilds its columns from whole nodes. Live metrics are not stored: they are minutes old at best.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Float, String, Table

from xpupool.server.storage.meta import metadata

nodes = Table(
    "nodes",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("site", String(63), nullable=False),
    Column("source", String(10), nullable=False),  # agent | cluster
    Column("status", String(10), nullable=False),  # ready | lost
    Column("schedulable", Boolean, nullable=False, default=True),
    Column("cpu_milli", BigInteger, nullable=False),
    Column("memory_mib", BigInteger, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("arch", String(40), nullable=False, default=""),
    Column("os", String(200), nullable=False, default=""),
    Column("devices", JSON, nullable=False),  # [DeviceIn as dict]
    Column("cordoned_devices", JSON, nullable=False),  # [uuid]
    Column("runtime", String(10), nullable=True),  # docker | podman | null (no container runtime)
    # [{key, value, effect}] (a database from before taints: null, none); what a registration
    # declared first, then what the admin set (POST /v1/nodes/NAME/taints)
    Column("taints", JSON, nullable=True),
    # the inventory the agent registered while some of it still held allocations (a drain):
    # {cpu_milli, memory_mib, devices}; null when what is served is what was registered
    Column("drain_to", JSON, nullable=True),
    # Unix time the admin asked to delete the node once its last allocation ends (DELETE
    # /v1/nodes/NAME?drain=true); null when no deletion waits. The node is cordoned meanwhile.
    Column("deleting_since", Float, nullable=True),
    # true: the node is cordoned because its site was drained (xpupool site drain), and its
    # site's undrain uncordons it; null/false: any cordon is the admin's own, which stays
    Column("site_drained", Boolean, nullable=True),
    Column("last_heartbeat", Float, nullable=True),
    Column("registered_at", Float, nullable=False),
)
