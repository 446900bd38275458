"""``GET /v1/accelerators``: the catalog's models and how many of each the pool has, so that a user
who got "no accelerator model of that name" can see which names work."""

from __future__ import annotations

from dataclasses import asdict

from xpupool.catalog.listing import list_accelerators
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.devices import Accelerator


def accelerators(plane: ControlPlane) -> list[Accelerator]:
    """Every catalog model with its device count in the pool (all registered nodes: cordoned and
    lost ones still belong to it), then the models the pool prints that the catalog lacks."""
    pool, catalog = plane.registered_models()
    return [Accelerator.model_validate(asdict(row)) for row in list_accelerators(catalog, pool)]
