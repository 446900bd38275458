"""Audit a cluster's device grants against card capacity: the double allocations a scheduler made.

Whoever scheduled them (HAMi's scheduler or xpupool's extender, which writes the same annotation),
bound pods say what they hold in their ``allocated`` annotation (``hami.io/vgpu-devices-allocated``
for NVIDIA: ``uuid,type,usedmem,usedcores:`` per device, ``;`` per container, HAMi v2.10.0
``pkg/device/devices.go`` ``EncodePodSingleDevice``, commit 4707fb02c91c), and Nodes say what each
card has in their registration annotation (``hami.io/node-nvidia-register``: ``devmem`` MiB,
``devcore``, ``count`` tasks a card). Each pod is charged as HAMi's scheduler charges it
(``pod_charge.py``): per card the larger of its init containers' peak and its app containers' sum,
the app containers' alone once its status says every init container succeeded. Summed per card
UUID, the charges of every bound pod must stay within the card's ``devmem``, ``devcore`` and
``count`` (each app container on a card is one task, as HAMi's ``Used`` counts them, and the init
containers one where no app container is); a grant on a card its node does not register is a
finding too. A benchmark counts the cards over capacity; an operator can run it on a live cluster.

Objects are plain dicts as the API serves them and are treated as hostile: an annotation that does
not decode is reported (object, key and reason), never raised, so one bad pod cannot hide the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xpupool.k8s.codec import hami
from xpupool.k8s.codec.pod_charge import charge, container_roles, init_finished
from xpupool.model.errors import RequestError

__all__ = ["AuditReport", "OverCommit", "audit_allocations"]


@dataclass(frozen=True, slots=True)
class OverCommit:
    """One card over capacity: ``resource`` is ``memory_mib``, ``cores``, ``count`` or
    ``unknown_card`` (a grant on a UUID its node does not register; capacity 0)."""

    node: str
    uuid: str
    resource: str
    used: int
    capacity: int
    pods: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"{self.node}/{self.uuid}: {self.resource} {self.used} > {self.capacity} "
            f"({', '.join(self.pods[:8])}{', ...' if len(self.pods) > 8 else ''})"
        )


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The audit's findings: every card over capacity (one entry per card and resource), the
    cards and bound pods checked, and the annotations that could not be read."""

    over: tuple[OverCommit, ...]
    cards: int
    pods: int
    unreadable: tuple[str, ...] = field(default=())

    @property
    def double_allocations(self) -> int:
        """Cards over capacity in at least one resource."""
        return len({(o.node, o.uuid) for o in self.over})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata")
    raw = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)}


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _cards(nodes: Iterable[Mapping[str, Any]], unreadable: list[str]) -> dict[str, dict[str, Any]]:
    """Node name -> card UUID -> its registered DeviceInfo."""
    out: dict[str, dict[str, Any]] = {}
    for obj in nodes:
        name = _name(obj)
        cards = out.setdefault(name, {})
        for key, value in _annotations(obj).items():
            if hami.kind_by_register_key(key) is None:
                continue
            try:
                infos = hami.decode_device_infos(key, value)
            except RequestError as exc:
                unreadable.append(f"node {name}: {exc}")
                continue
            cards.update({info.id: info for info in infos})
    return out


def audit_allocations(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> AuditReport:
    """Every bound pod's (``spec.nodeName`` set) ``allocated`` annotations, charged as HAMi
    charges them, summed per card and compared with the card's registration on that node. Pods
    not bound yet hold nothing."""
    unreadable: list[str] = []
    cards = _cards(nodes, unreadable)
    use: dict[tuple[str, str], dict[str, Any]] = {}
    checked = 0
    for obj in pods:
        spec = obj.get("spec")
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        if not isinstance(node, str) or not node:
            continue
        name = _name(obj)
        try:
            assigned = hami.pod_assignment(_annotations(obj))
        except RequestError as exc:
            unreadable.append(f"pod {name}: {exc}")
            continue
        checked += 1
        roles, done = container_roles(spec), init_finished(obj)
        for _kind, containers in assigned:
            grants = [[(d.uuid, d.used_mem_mib, d.used_cores) for d in c] for c in containers]
            for part in charge(grants, roles, done):
                for uuid, mem, cores in part.shares:
                    slot = use.setdefault(
                        (node, uuid), {"memory_mib": 0, "cores": 0, "tasks": 0, "pods": []}
                    )
                    slot["memory_mib"] += mem
                    slot["cores"] += cores
                    slot["tasks"] += 1
                    if name not in slot["pods"]:
                        slot["pods"].append(name)
    over: list[OverCommit] = []
    for (node, uuid), slot in sorted(use.items()):
        pods_on = tuple(slot["pods"])
        info = cards.get(node, {}).get(uuid)
        if info is None:
            over.append(OverCommit(node, uuid, "unknown_card", slot["tasks"], 0, pods_on))
            continue
        for resource, used, capacity in (
            ("memory_mib", slot["memory_mib"], info.devmem),
            ("cores", slot["cores"], info.devcore),
            ("count", slot["tasks"], info.count),
        ):
            if used > capacity:
                over.append(OverCommit(node, uuid, resource, used, capacity, pods_on))
    n_cards = sum(len(c) for c in cards.values())
    return AuditReport(tuple(over), n_cards, checked, tuple(unreadable))
