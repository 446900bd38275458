"""``xpupool top``'s frame: the fleet by site and node (devices allocated, device memory allocated
against what the probes see in use, utilisation) and the queues (pending, running, quota use).

Built from four list calls so that one frame is one consistent-enough read; pure once fetched, so
tests render a frame from fixed models.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.text import Text

from xpupool.client._http import Client
from xpupool.client._render import node_status, queues_table
from xpupool.client._views import DeviceView, NodeView, QueueView
from xpupool.client.fit_table import Column, FitTable
from xpupool.model.quantity import format_mib

BAR_WIDTH = 10


@dataclass(slots=True)
class Snapshot:
    nodes: list[NodeView]
    devices: list[DeviceView]
    queues: list[QueueView]
    taken_at: float = field(default_factory=time.time)


def take_snapshot(client: Client, site: str | None = None) -> Snapshot:
    nodes = client.nodes(site=site)
    names = {n.name for n in nodes}
    devices = [d for d in client.devices() if d.node in names]
    return Snapshot(nodes, devices, client.queues())


def bar(part: float, whole: float) -> Text:
    """'███░░░░░░░ 30%'; an empty whole is '-'."""
    if whole <= 0:
        return Text("-")
    frac = min(max(part / whole, 0.0), 1.0)
    filled = round(frac * BAR_WIDTH)
    style = "green" if frac < 0.7 else ("yellow" if frac < 0.9 else "red")
    return (
        Text("█" * filled, style=style)
        + Text("░" * (BAR_WIDTH - filled), style="dim")
        + Text(f" {frac * 100:3.0f}%")
    )


@dataclass(slots=True)
class _Usage:
    """Sums over a set of devices; ``used_mib``/``util`` only over devices that report them."""

    devices: int = 0
    busy: int = 0
    memory_mib: int = 0
    allocated_mib: int = 0
    used_mib: int = 0
    reporting: int = 0
    util_sum: float = 0.0
    util_n: int = 0

    def add(self, d: DeviceView) -> None:
        self.devices += 1
        self.busy += bool(d.allocated_memory_mib or d.allocated_core_permille)
        self.memory_mib += d.memory_mib
        self.allocated_mib += d.allocated_memory_mib
        if d.metrics is not None and d.metrics.memory_used_mib is not None:
            self.used_mib += d.metrics.memory_used_mib
            self.reporting += 1
        if d.metrics is not None and d.metrics.utilization_pct is not None:
            self.util_sum += d.metrics.utilization_pct
            self.util_n += 1

    def cells(self) -> list[str | Text]:
        used = format_mib(self.used_mib) if self.reporting else "-"
        util = f"{self.util_sum / self.util_n:.0f}%" if self.util_n else "-"
        return [
            f"{self.busy}/{self.devices}",
            bar(self.allocated_mib, self.memory_mib),
            f"{format_mib(self.allocated_mib)}/{format_mib(self.memory_mib)}",
            used,
            util,
        ]


_USAGE_COLUMNS = (
    Column("devices busy"),
    Column("memory allocated"),
    Column("alloc/total", spare=2),
    Column("used (probed)", spare=1),
    Column("util"),
)


def _usage_table(title: str, key_columns: Sequence[str]) -> FitTable:
    return FitTable([*(Column(c) for c in key_columns), *_USAGE_COLUMNS], title)


def frame(snap: Snapshot) -> RenderableType:
    by_node: dict[str, _Usage] = defaultdict(_Usage)
    by_site: dict[str, _Usage] = defaultdict(_Usage)
    for d in snap.devices:
        by_node[d.node].add(d)
        by_site[d.site].add(d)
    sites = _usage_table("sites", ("site", "nodes ready"))
    ready: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for n in snap.nodes:
        ready[n.site][0] += n.status == "ready"
        ready[n.site][1] += 1
    for site in sorted(ready):
        sites.add_row(site, f"{ready[site][0]}/{ready[site][1]}", *by_site[site].cells())
    nodes = _usage_table("nodes", ("node", "site", "status"))
    for n in sorted(snap.nodes, key=lambda n: (n.site, n.name)):
        nodes.add_row(n.name, n.site, node_status(n), *by_node[n.name].cells())
    pending = sum(q.pending for q in snap.queues)
    running = sum(q.running for q in snap.queues)
    stamp = time.strftime("%H:%M:%S", time.localtime(snap.taken_at))
    head = Text(
        f"xpupool top  {stamp}  nodes {len(snap.nodes)}  devices {len(snap.devices)}  "
        f"jobs pending {pending} running {running}",
        style="bold",
    )
    return Group(head, sites, nodes, queues_table(snap.queues))
