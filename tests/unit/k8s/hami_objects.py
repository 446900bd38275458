"""Nodes and pods as a cluster that runs HAMi has them, for tests that read them through the real
decoders: the JSON registration HAMi's device plugin writes (HAMi v2.10.0, commit 4707fb02c91c,
``pkg/device/devices.go`` ``MarshalNodeDevices``) and the pod annotations HAMi's scheduler writes
(``EncodePodSingleDevice``: ``uuid,type,usedmem,usedcores:`` per card, ``;`` after every container
of the pod, init containers first), with the pod status a kubelet reports."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

REGISTER = "hami.io/node-nvidia-register"
ALLOCATED = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
A100 = ("NVIDIA A100-SXM4-80GB", 81920)
H100 = ("NVIDIA H100 80GB HBM3", 81920)

Grant = tuple[str, int, int]  # (card UUID, MiB, cores %)


def hami_node(
    name: str, cards: int = 1, model: tuple[str, int] = A100, count: int = 10
) -> dict[str, Any]:
    """A Node whose cards ``GPU-<name>-<i>`` HAMi's device plugin registered."""
    kind, mib = model
    infos = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": count,
            "devmem": mib,
            "devcore": 100,
            "type": kind,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(cards)
    ]
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {REGISTER: json.dumps(infos)},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}},
    }


def container(name: str, sidecar: bool = False, **limits: str) -> dict[str, Any]:
    """A container asking for ``limits`` (``gpu``, ``gpumem``, ``gpumem_percentage``,
    ``gpucores`` as ``nvidia.com/...``); ``sidecar``: an init container that keeps running
    (``restartPolicy: Always``)."""
    out: dict[str, Any] = {
        "name": name,
        "image": "registry.invalid/none:0",
        "resources": {
            "limits": {f"nvidia.com/{k.replace('_', '-')}": v for k, v in limits.items()}
        },
    }
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def encode(grants: Sequence[Sequence[Grant]]) -> str:
    """HAMi's pod device encoding: one entry per container of the pod, init containers first."""
    return "".join("".join(f"{u},NVIDIA,{m},{c}:" for u, m, c in g) + ";" for g in grants)


def hami_pod(
    name: str,
    node: str | None,
    init: Sequence[dict[str, Any]] = (),
    app: Sequence[dict[str, Any]] = (),
    grants: Sequence[Sequence[Grant]] | None = None,
    init_states: Sequence[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of ``init`` and ``app`` containers; with ``grants`` (one entry per container, init
    containers first) bound to ``node`` as HAMi's scheduler binds it; ``init_states`` the
    ``state`` of each init container's status (None: no status yet)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "annotations": dict(annotations or {}),
    }
    spec: dict[str, Any] = {"containers": list(app) or [container("main")]}
    if init:
        spec["initContainers"] = list(init)
    status: dict[str, Any] = {"phase": "Pending"}
    if grants is not None:
        text = encode(grants)
        meta["annotations"].update(
            {
                "hami.io/vgpu-node": str(node),
                "hami.io/vgpu-time": "1767225600",
                TO_ALLOCATE: text,
                ALLOCATED: text,
                "hami.io/bind-phase": "success",
                "hami.io/bind-time": "1767225600",
            }
        )
    if node is not None:
        spec["nodeName"] = node
    if init_states is not None:
        status["initContainerStatuses"] = [
            {"name": c["name"], "state": s, "ready": False, "restartCount": 0, "image": c["image"]}
            for c, s in zip(init, init_states, strict=True)
        ]
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}
FAILED = {"terminated": {"exitCode": 1, "reason": "Error"}}
