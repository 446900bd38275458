"""A card cut into hardware partitions, as the devices the engine places on.

The engine schedules each MIG instance or vNPU as a device of its own (``Device.partition``), so
every front that declares a layout rather than reading one from the vendor tool (the cluster
file, the fake probe, the simulator, tests) cuts its cards here: one check of the layout against
the catalog's geometry, one naming of the instances. Real probes report instances as NVML and
npu-smi list them, with their own UUIDs.
"""

from __future__ import annotations

from dataclasses import replace

from xpupool.catalog.accelerators import AcceleratorCatalog
from xpupool.catalog.partition_geometry import Layout, layout_problem
from xpupool.catalog.partitions import PartitionCatalog
from xpupool.model.device import Device
from xpupool.model.errors import RequestError


def read_layout(field: str, data: object) -> Layout:
    """A layout in the words cluster files, fake-probe files and the API use: ``["3g.40gb@0",
    "vir05_1c_16g"]`` -> ``(("3g.40gb", 0), ("vir05_1c_16g", None))`` (MIG: profile@first memory
    slice; vNPU: the template alone). RequestError on ``field`` (``field[i]`` for one item) when
    it is not a non-empty list of such words; the geometry is checked by :func:`cut_card`."""
    if not isinstance(data, list) or not data:
        raise RequestError(field, data, "expected a list such as [3g.40gb@0, 3g.40gb@4]")
    layout: list[tuple[str, int | None]] = []
    for i, item in enumerate(data):
        name, at, start = str(item).partition("@")
        if not name or (at and not (start.isascii() and start.isdigit())):
            raise RequestError(f"{field}[{i}]", item, "expected PROFILE@START such as '3g.40gb@4'")
        layout.append((name, int(start) if at else None))
    return tuple(layout)


def layout_words(layout: Layout) -> list[str]:
    """``layout`` in the words :func:`read_layout` reads."""
    return [name if start is None else f"{name}@{start}" for name, start in layout]


def instance_uuid(card_uuid: str, kind: str, start: int | None, index: int) -> str:
    """A stable UUID for a declared instance: ``MIG-<card>-<start>`` (MIG names its instances
    ``MIG-...`` and ``CUDA_VISIBLE_DEVICES`` takes them so), ``<card>-vnpu<index>`` for vNPU."""
    if kind == "mig":
        return f"MIG-{card_uuid}-{start}"
    return f"{card_uuid}-vnpu{index}"


def cut_card(
    card: Device,
    layout: Layout,
    partitions: PartitionCatalog,
    accelerators: AcceleratorCatalog,
    field: str = "partitions",
) -> tuple[Device, ...]:
    """The instances of ``layout`` on ``card``, in layout order, each a device with the card's
    vendor, model, index, links and driver and the profile's memory. Raises RequestError on
    ``field`` when the card's model has no partitions or the layout breaks its geometry."""
    scheme = partitions.scheme_for(card.model, card.vendor, accelerators)
    if scheme is None:
        raise RequestError(field, card.model, "this model has no hardware partitions")
    problem = layout_problem(scheme, layout)
    if problem is not None:
        raise RequestError(field, layout_words(layout), problem)
    out = []
    for i, (name, start) in enumerate(layout):
        profile = scheme.profile(name)
        assert profile is not None
        out.append(
            replace(
                card,
                uuid=instance_uuid(card.uuid, scheme.kind, start, i),
                memory_mib=profile.memory_mib,
                max_tasks=1,
                share_mode=scheme.kind,
                partition=name,
                partition_of=card.uuid,
                partition_start=start,
            )
        )
    return tuple(out)
