"""Nodes and assigned pods of a cluster as the engine's records, for the cluster view.

A Node's devices come from xpupool's own node agent (``xpupool.io/devices``) when it runs there,
else from HAMi's registration annotations (``hami.io/node-nvidia-register`` and the other
vendors'), so a cluster that runs HAMi's device plugins needs nothing new on its nodes. Its CPU
and memory are its ``status.allocatable``; its site the ``xpupool.io/site`` label; its cordoned
cards HAMi's ``hami.io/device-cordon`` (whoever registered them). A Node with no managed device is
no node of the pool (None).

A pod holds what its ``allocated`` annotations say (HAMi's encoding, which xpupool's bind writes
too), on the node its ``hami.io/vgpu-node`` names (where HAMi's ``Filter``, or xpupool's bind,
assigned it: HAMi charges the pod there from then on, bound or not), else on the node it is bound
to (``spec.nodeName``); the cluster view refuses a charge whose node is not the one the pod is
bound to. Its init containers are charged as HAMi charges them (``pod_charge.py``, from the pod's
spec and status): a restarted extender rebuilds the exact charges from the pods, whoever
scheduled them. A bad annotation raises ``RequestError`` naming it; the view logs it and leaves
that object out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from xpupool.k8s.codec import hami
from xpupool.k8s.codec.hami_partitions import mig_instance_uuids
from xpupool.k8s.codec.node_annotations import DEVICES_KEY, decode_devices
from xpupool.k8s.codec.pod_charge import container_roles, init_finished
from xpupool.k8s.codec.quantity import parse_quantity
from xpupool.k8s.informers.cluster_view import CardShare, PodDevices
from xpupool.model.device import Node
from xpupool.model.errors import RequestError

SITE_LABEL = "xpupool.io/site"
VGPU_NODE = "hami.io/vgpu-node"


def decode_node(obj: Mapping[str, Any]) -> Node | None:
    """The pool's record of a Node object, or None when it has no device xpupool manages."""
    meta = _mapping(obj.get("metadata"))
    name = str(meta.get("name") or "")
    annotations = {str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()}
    if DEVICES_KEY in annotations:
        devices = tuple(d.to_device() for d in decode_devices(annotations[DEVICES_KEY]))
    else:
        devices = hami.node_devices(annotations)
    if not devices:
        return None
    allocatable = _mapping(_mapping(obj.get("status")).get("allocatable"))
    where = "status.allocatable"
    cpu, _ = parse_quantity(f'{where}["cpu"]', allocatable.get("cpu", 0))
    memory, _ = parse_quantity(f'{where}["memory"]', allocatable.get("memory", 0))
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()}
    return Node(
        name=name,
        cpu_milli=math.floor(cpu * 1000),
        memory_mib=math.floor(memory / (1 << 20)),
        devices=devices,
        site=labels.get(SITE_LABEL, "default"),
        labels=labels,
        cordoned_devices=hami.cordoned_cards(annotations),
    )


def decode_pod_devices(obj: Mapping[str, Any]) -> PodDevices | None:
    """What a pod was given, per container in HAMi's order, with how long each runs (its spec)
    and whether its init containers are done (its status), on the node it was assigned to
    (``hami.io/vgpu-node``; without one, the node it is bound to), or None when it holds nothing
    managed or is neither assigned nor bound."""
    meta = _mapping(obj.get("metadata"))
    annotations = {str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()}
    spec = _mapping(obj.get("spec"))
    node = annotations.get(VGPU_NODE) or spec.get("nodeName")
    if not node:
        return None
    per_container: dict[int, list[CardShare]] = {}
    instances = mig_instance_uuids(annotations)  # a MIG instance is listed as its card
    for kind, containers in hami.pod_assignment(annotations):
        mig = instances if kind.vendor == "nvidia" else {}
        for i, devices in enumerate(containers):
            shares = per_container.setdefault(i, [])
            for j, d in enumerate(devices):
                uuid = mig.get((i, j), d.uuid)
                shares.append(CardShare(uuid, d.used_mem_mib, hami.core_permille(d, kind)))
    if not any(per_container.values()):
        return None
    width = max(per_container) + 1
    held = tuple(tuple(per_container.get(i, [])) for i in range(width))
    roles = container_roles(spec)[:width]
    return PodDevices(str(node), held, roles=roles, init_done=init_finished(obj))


def _mapping(value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError("object", repr(value)[:80], "expected a JSON object")
    return value
