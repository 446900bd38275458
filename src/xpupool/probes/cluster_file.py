"""Simulated hosts from a YAML cluster file, so one laptop can hold a realistic mixed pool.

    device_models:             # optional, per device model as the devices name it
      NVIDIA A100-SXM4-80GB: {device_split_count: 4, overcommit: {memory: 1.5, cores: 2.0}}
    nodes:
      - name: bj-a100          # with count: bj-a100-0, bj-a100-1, ...
        count: 3
        site: beijing
        cpu: 128               # cores ("500m" style also accepted)
        memory: 1Ti
        labels: {rack: r1}
        runtime: docker        # optional: docker or podman runs its image jobs; none by default
        taints: [gpu=true:NoSchedule]  # optional: Kubernetes' taints, as text or {key, value, effect}
        device_split_count: 2  # optional: most tasks sharing one of its cards (wins over the model's)
        overcommit: {memory: 1.5}  # optional: over-commit factors of its cards (win over the model's)
        devices:               # the fake probe's entries (probes/fake.py)
          - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 8, memory: 80Gi,
             driver: 550.54.15, runtimes: {cuda: "12.4"}, link_group_size: 4}

Device UUIDs are ``<node>-<index>``, unique across the file; a card cut into partitions
(``partitions`` in its device entry, ``probes/fake.py``) is its instances instead,
``MIG-<node>-<index>-<start>`` (MIG) or ``<node>-<index>-vnpu<k>`` (vNPU). A node that declares ``runtime``
takes image jobs; the agent inside ``xpupool up`` runs them with that runtime. A node's
``taints`` keep work that does not tolerate them off it (``model/taint.py``; NoExecute is
refused); a node the store has already keeps the taints it has there. Bad
input raises RequestError naming the path, e.g. ``nodes[2].devices[0].memory``. The capacity
settings (``device_split_count``, ``overcommit``) are carried on each Device; docs/capacity.md
says what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from xpupool.catalog.partition_cards import instance_uuid
from xpupool.model.device import (
    CONTAINER_RUNTIMES,
    Device,
    Node,
    check_max_tasks,
    check_overcommit,
)
from xpupool.model.errors import RequestError
from xpupool.model.quantity import parse_cpu_milli, parse_memory_mib
from xpupool.model.taint import Taint, check_taints, read_taint
from xpupool.probes.base import DeviceInfo
from xpupool.probes.fake import entries, parse_fake

_KEYS = {
    "name", "count", "site", "cpu", "memory", "labels", "devices", "schedulable", "runtime",
    "device_split_count", "overcommit", "taints",
}  # fmt: skip
_TOP_KEYS = {"nodes", "device_models"}
_MODEL_KEYS = {"device_split_count", "overcommit"}
_OVERCOMMIT_KEYS = ("memory", "cores")


@dataclass(frozen=True, slots=True)
class CapacitySettings:
    """What a node entry or a ``device_models`` entry sets on its cards; None: not set there."""

    max_tasks: int | None = None
    memory_overcommit: float | None = None
    cores_overcommit: float | None = None

    def over(self, fallback: CapacitySettings) -> CapacitySettings:
        """These settings, each unset one taken from ``fallback`` (a node's over its model's)."""
        return CapacitySettings(
            fallback.max_tasks if self.max_tasks is None else self.max_tasks,
            fallback.memory_overcommit
            if self.memory_overcommit is None
            else self.memory_overcommit,
            fallback.cores_overcommit if self.cores_overcommit is None else self.cores_overcommit,
        )

    def apply(self, device: Device) -> Device:
        """``device`` with the settings that are set."""
        if self.max_tasks is not None:
            device = replace(device, max_tasks=self.max_tasks)
        if self.memory_overcommit is not None:
            device = replace(device, memory_overcommit=self.memory_overcommit)
        if self.cores_overcommit is not None:
            device = replace(device, cores_overcommit=self.cores_overcommit)
        return device


def _settings(where: str, entry: Mapping[str, object]) -> CapacitySettings:
    limit = entry.get("device_split_count")
    max_tasks = None if limit is None else check_max_tasks(f"{where}.device_split_count", limit)
    factors = entry.get("overcommit") or {}
    if not isinstance(factors, Mapping):
        raise RequestError(f"{where}.overcommit", factors, "expected {memory: 1.5, cores: 2.0}")
    unknown = sorted(set(factors) - set(_OVERCOMMIT_KEYS))
    if unknown:
        raise RequestError(
            f"{where}.overcommit.{unknown[0]}", factors[unknown[0]], "known: memory, cores"
        )
    memory, cores = (
        None if factors.get(k) is None else check_overcommit(f"{where}.overcommit.{k}", factors[k])
        for k in _OVERCOMMIT_KEYS
    )
    return CapacitySettings(max_tasks, memory, cores)


def _taints(where: str, data: object) -> tuple[Taint, ...]:
    """A node entry's ``taints``: a list of ``key=value:Effect`` texts or ``{key, value, effect}``
    objects, at most one per key and effect."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise RequestError(f"{where}.taints", data, "expected a list such as [gpu=true:NoSchedule]")
    return check_taints(
        f"{where}.taints", (read_taint(f"{where}.taints[{i}]", t) for i, t in enumerate(data))
    )


def _model_settings(data: Mapping[str, object]) -> dict[str, CapacitySettings]:
    """The ``device_models`` map: model name (as the devices name it) -> its settings."""
    models = data.get("device_models") or {}
    if not isinstance(models, Mapping):
        raise RequestError("device_models", models, "expected a mapping of model name to settings")
    out: dict[str, CapacitySettings] = {}
    for model, settings in models.items():
        where = f"device_models[{model}]"
        if not isinstance(settings, Mapping):
            raise RequestError(
                where, settings, "expected a mapping such as {device_split_count: 4}"
            )
        unknown = sorted(set(settings) - _MODEL_KEYS)
        if unknown:
            raise RequestError(
                f"{where}.{unknown[0]}",
                settings[unknown[0]],
                f"unknown key; known: {', '.join(sorted(_MODEL_KEYS))}",
            )
        out[str(model)] = _settings(where, settings)
    return out


def parse_cluster(data: object) -> list[Node]:
    nodes: list[Node] = []
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            known = ", ".join(sorted(_TOP_KEYS))
            raise RequestError(unknown[0], data[unknown[0]], f"unknown key; known: {known}")
    models = _model_settings(data) if isinstance(data, Mapping) else {}
    used_models: set[str] = set()
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
        taints = _taints(where, entry.get("taints"))
        own = _settings(where, entry)
        names = [name] if count is None else [f"{name}-{k}" for k in range(count)]
        for node_name in names:
            devices = tuple(
                own.over(models.get(d.model, CapacitySettings())).apply(_named(node_name, d, k))
                for k, d in enumerate(template)
            )
            used_models.update(d.model for d in devices)
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
                    taints=taints,
                )
            )
    unused = sorted(set(models) - used_models)
    if unused:
        raise RequestError(f"device_models[{unused[0]}]", unused[0], "no device of this model")
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise RequestError("nodes.name", node.name, "duplicate node name")
        seen.add(node.name)
    return nodes


def _named(node: str, info: DeviceInfo, position: int) -> Device:
    """The device of ``info`` on ``node``: a card is ``<node>-<index>``; a partition of it is
    named from that (``MIG-<node>-<index>-<start>``; ``<node>-<index>-vnpu<position>``, its
    place among the node's devices) and points to it."""
    card = f"{node}-{info.index}"
    if info.partition is None:
        return replace(info.to_device(), uuid=card)
    kind = "mig" if info.partition_start is not None else "vnpu"
    uuid = instance_uuid(card, kind, info.partition_start, position)
    return replace(info.to_device(), uuid=uuid, partition_of=card)


def load_cluster(path: str | Path) -> list[Node]:
    """Nodes of a cluster file; YAML errors become a RequestError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise RequestError(str(path), "", f"not valid YAML: {exc}") from None
    return parse_cluster(data)
