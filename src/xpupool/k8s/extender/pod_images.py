"""A pod's container images add the software needs the catalog reads from them.

The same rules as a job's ``--image`` in the embedded control plane (``catalog/images.py``,
merged by ``catalog/image_needs.py``): a container running ``pytorch/pytorch:2.4.0-cuda12.4-...``
is placed only on cards whose driver serves CUDA 12.4, without the user writing
``xpupool.io/software``. What the pod says wins: a need for the same runtime in its annotations
stays, and a device type its resource names keeps its models. An image no rule knows adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from xpupool.catalog.image_needs import merge_image_needs
from xpupool.catalog.images import ImageCatalog
from xpupool.k8s.codec.pod_request import PodDemand

MAX_IMAGE_CHARS = 1024
"""An image reference longer than this reads as none (a hostile pod's padding)."""


def container_images(pod: object) -> dict[str, str]:
    """Container name -> image, init containers included (names are unique in a pod); entries
    that are not well-formed are left out (``pod_request`` has already refused a malformed pod)."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    out: dict[str, str] = {}
    if not isinstance(spec, Mapping):
        return out
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for ctr in items if isinstance(items, list) else ():
            if not isinstance(ctr, Mapping):
                continue
            name, image = ctr.get("name"), ctr.get("image")
            if isinstance(name, str) and isinstance(image, str) and len(image) <= MAX_IMAGE_CHARS:
                out[name] = image
    return out


def with_image_needs(demand: PodDemand, pod: object, catalog: ImageCatalog) -> PodDemand:
    """``demand`` with each device container's request carrying its image's needs."""
    images = container_images(pod)
    out = []
    for d in demand.demands:
        merged = merge_image_needs(d.request, images.get(d.name), catalog)
        out.append(replace(d, request=merged.request) if merged.changed else d)
    return replace(demand, demands=tuple(out))
