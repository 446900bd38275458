"""``xpupool k8s agent --hami-register``: HAMi's node registration annotations for the cards the
node agent found, so HAMi's own scheduler (beside xpupool's, or after moving back) and anything
else that reads HAMi's format sees the same cards as ``xpupool.io/devices``.

Which annotation a card goes to is read from the resource table (``resource_names.DEVICE_KINDS``),
not written per vendor: a card is registered under a device type only when that type is the one
row of the table for the card's vendor and model and the row names a ``register_key`` (HAMi reads
the type's devices from a Node annotation). That gives NVIDIA, AMD, Hygon DCU, each Ascend vNPU
chip and each Iluvatar chip; Kunlunxin (two rows for one vendor, whole cards or vXPU: which one the
node's device plugin serves is not in the probe's view), Cambricon, MetaX, Moore Threads and
Enflame (HAMi reads their devices from node capacity) are never written. :data:`REGISTER_KEYS` is
that set of keys, and the node agent's admission policy lets the agent write exactly those.

The encoding is HAMi's: ``MarshalNodeDevices`` for the JSON types, ``EncodeNodeDevices`` for the
legacy ones (``hami.py``). A type whose cards are all gone keeps its last annotation (the agent
never deletes; HAMi's scheduler drops a node's devices itself once its device plugin reports none,
``pkg/device/devices.go`` ``CheckHealth``).
"""

from __future__ import annotations

from collections.abc import Sequence

from xpupool.agent.inventory import device_in
from xpupool.catalog import AcceleratorCatalog, load_accelerators
from xpupool.k8s.codec.hami import encode_legacy_register, encode_register, info_from_device
from xpupool.k8s.codec.resource_names import DEVICE_KINDS, DeviceKind
from xpupool.model.device import Device
from xpupool.probes.base import DeviceInfo as ProbedDevice

__all__ = ["REGISTER_KEYS", "hami_register_annotations", "register_kind"]


def _overlaps(a: DeviceKind, b: DeviceKind) -> bool:
    """Two rows that a card of one vendor and model could both belong to."""
    return a.vendor == b.vendor and (a.model is None or b.model is None or a.model == b.model)


def _writable(kind: DeviceKind) -> bool:
    return kind.register_key is not None and not any(
        other is not kind and _overlaps(kind, other) for other in DEVICE_KINDS
    )


_WRITABLE: tuple[DeviceKind, ...] = tuple(k for k in DEVICE_KINDS if _writable(k))

# Every annotation key the agent may write with --hami-register (the admission policy's list).
REGISTER_KEYS: frozenset[str] = frozenset(k.register_key for k in _WRITABLE if k.register_key)


def register_kind(device: Device, catalog: AcceleratorCatalog | None = None) -> DeviceKind | None:
    """The HAMi device type whose registration annotation lists ``device``, or None when the
    table has no single such row for the card's vendor and model (catalog name)."""
    found = (catalog or load_accelerators()).lookup(device.model, device.vendor)
    model = found.name if found is not None else device.model
    rows = [k for k in DEVICE_KINDS if k.vendor == device.vendor and k.model in (None, model)]
    if len(rows) != 1 or rows[0] not in _WRITABLE:
        return None
    return rows[0]


def hami_register_annotations(
    probed: Sequence[ProbedDevice], catalog: AcceleratorCatalog | None = None
) -> dict[str, str]:
    """HAMi's registration annotations for the cards the probes found: one per device type that
    has cards here, the cards in index order. Cards the inventory leaves out (no memory, a bad
    record: logged by ``device_in``) and cards of no writable type are left out here too."""
    catalog = catalog or load_accelerators()
    per_kind: dict[str, tuple[DeviceKind, list[Device]]] = {}
    for d in probed:
        wire = device_in(d)
        if wire is None:
            continue
        device = wire.to_device()
        kind = register_kind(device, catalog)
        if kind is None or kind.register_key is None:
            continue
        per_kind.setdefault(kind.register_key, (kind, []))[1].append(device)
    out: dict[str, str] = {}
    for key, (kind, devices) in per_kind.items():
        infos = [
            info_from_device(d, kind) for d in sorted(devices, key=lambda d: (d.index, d.uuid))
        ]
        out[key] = (
            encode_legacy_register(infos)
            if kind.register_format == "legacy"
            else encode_register(infos)
        )
    return out
