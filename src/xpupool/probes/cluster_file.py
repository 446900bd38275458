"""Simulated hosts from a YAML cluster file, so one laptop can hold a realistic mixed pool.

    nodes:
      - name: bj-a100          # with count: bj-a100-0, bj-a100-1, ...
        count: 3
        site: beijing
        cpu: 128               # cores ("500m" style also accepted)
        memory: 1Ti
        labels: {rack: r1}
        runtime: docker        # optional: docker or podman runs its image jobs; none by default
        devices:               # the fake probe's entries (probes/fake.py)
          - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 8, memory: 80Gi,
             driver: 550.54.15, runtimes: {cuda: "12.4"}, link_group_size: 4}

Device UUIDs are ``<node>-<index>``, unique across the file. A node that declares ``runtime``
takes image jobs; the agent inside ``xpupool up`` runs them with that runtime. Bad
input raises RequestError naming the path, e.g. ``nodes[2].devices[0].memory``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from xpupool.model.device import CONTAINER_RUNTIMES, Node
from xpupool.model.errors import RequestError
from xpupool.model.quantity import parse_cpu_milli, parse_memory_mib
from xpupool.probes.fake import entries, parse_fake

_KEYS = {"name", "count", "site", "cpu", "memory", "labels", "devices", "schedulable", "runtime"}


def parse_cluster(data: object) -> list[Node]:
    nodes: list[Node] = []
    for where, entry in entries(data, "nodes", _KEYS):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise RequestError(f"{where}.name", name, "a node name is required")
        count = entry.get("count")
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 1
        ):
            raise RequestError(f"{where}.count", count, "must be a whole number >= 1")
        cpu = parse_cpu_milli(f"{where}.cpu", entry.get("cpu", 0))
        memory = parse_memory_mib(f"{where}.memory", entry.get("memory", 0))
        try:
            template = parse_fake({"devices": entry.get("devices") or []})
        except RequestError as exc:
            raise exc.under(where) from None
        labels = entry.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise RequestError(f"{where}.labels", labels, "expected a mapping such as {rack: r1}")
        runtime = entry.get("runtime")
        if runtime is not None and runtime not in CONTAINER_RUNTIMES:
            raise RequestError(
                f"{where}.runtime", runtime, f"expected one of: {', '.join(CONTAINER_RUNTIMES)}"
            )
        names = [name] if count is None else [f"{name}-{k}" for k in range(count)]
        for node_name in names:
            devices = tuple(replace(d.to_device(), uuid=f"{node_name}-{d.index}") for d in template)
            nodes.append(
                Node(
                    node_name,
                    cpu,
                    memory,
                    devices,
                    site=str(entry.get("site", "default")),
                    labels={str(k): str(v) for k, v in labels.items()},
                    schedulable=bool(entry.get("schedulable", True)),
                    container_runtime=runtime,
                )
            )
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise RequestError("nodes.name", node.name, "duplicate node name")
        seen.add(node.name)
    return nodes


def load_cluster(path: str | Path) -> list[Node]:
    """Nodes of a cluster file; YAML errors become a RequestError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise RequestError(str(path), "", f"not valid YAML: {exc}") from None
    return parse_cluster(data)
