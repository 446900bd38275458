"""A job's image adds the software needs and product line the catalog reads from its name.

``--image pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime`` asks for a driver that serves CUDA 12.4
without the user typing ``cuda>=12.4``. What the user did type wins: a need for the same runtime
in the request stays, and a request that already names vendors or models keeps them; each such
choice, and an image no rule knows, is said in the job's events. Pure: submission calls it before
it stores the request, so the stored request holds the merged needs and a restart keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xpupool.catalog.images import ImageCatalog, ImageNeeds
from xpupool.model.request import Request, SoftwareNeed


@dataclass(frozen=True, slots=True)
class ImageMerge:
    """The request with the image's needs merged, what was added, and the events to record."""

    request: Request
    added: tuple[SoftwareNeed, ...]
    product_added: bool
    events: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.added) or self.product_added


def merge_image_needs(
    req: Request, image: str | None, catalog: ImageCatalog, *, keep_given: bool = True
) -> ImageMerge:
    """Merge what ``image`` implies into ``req`` (unchanged when ``image`` is None).

    ``keep_given``: a need the request names itself wins over the image's need of the same
    software (the user knows the image better than the catalog). False when the request's needs
    are not the user's but another catalog's (a model job's serving runtime): then both hold,
    and the stricter decides."""
    if image is None:
        return ImageMerge(req, (), False, ())
    found = catalog.needs_for(image)
    events = list(found.notes)
    if not found.software and found.product is None:
        return ImageMerge(req, (), False, tuple(events))
    implied = _implied_text(found)
    devices = req.devices
    if devices.count == 0:
        events.append(
            f"image {image} implies {implied} (catalog rule {found.rule}), but the job asks "
            "for no devices: nothing added"
        )
        return ImageMerge(req, (), False, tuple(events))
    given = {need.name: need for need in devices.software} if keep_given else {}
    added = tuple(
        need for need in found.software if need.name not in given and need not in devices.software
    )
    for need in found.software:
        if need.name in given:
            events.append(
                f"software need {given[need.name]} given by the request wins over {need} "
                f"implied by image {image}"
            )
    product_added = False
    vendors, models = devices.vendors, devices.models
    if found.product is not None:
        if vendors or models:
            chosen = ", ".join((*vendors, *models))
            events.append(
                f"the request's devices ({chosen}) win over image {image}'s product line "
                f"{found.product.name}"
            )
        else:
            vendors, models = found.product.vendors, found.product.models
            product_added = True
    if added or product_added:
        parts = []
        if added:
            parts.append("software needs " + ", ".join(str(n) for n in added))
        if product_added:
            assert found.product is not None
            parts.append(f"product line {_product_text(found)}")
        events.append(
            f"image {image} (catalog rule {found.rule}, {found.source}): "
            f"{' and '.join(parts)} added"
        )
    merged = replace(devices, software=(*devices.software, *added), vendors=vendors, models=models)
    return ImageMerge(replace(req, devices=merged), added, product_added, tuple(events))


def _implied_text(found: ImageNeeds) -> str:
    parts = [str(n) for n in found.software]
    if found.product is not None:
        parts.append(_product_text(found))
    return ", ".join(parts)


def _product_text(found: ImageNeeds) -> str:
    assert found.product is not None
    cards = ", ".join((*found.product.vendors, *found.product.models))
    return f"{found.product.name} ({cards})"
