"""Namespace ResourceQuotas on HAMi's card resources, as HAMi's quota plugin reads them.

HAMi v2.10.0 (``pkg/device/quota.go`` ``QuotaManager``, fed by a ResourceQuota informer in
``pkg/scheduler/scheduler.go``) caps what a namespace's pods hold of each device type's memory and
cores resources: a quota's ``spec.hard`` key ``limits.<name>``, where ``<name>`` is a type's memory
or cores resource (``limits.nvidia.com/gpumem``, ``limits.nvidia.com/gpucores``; count names
such as ``nvidia.com/gpu`` are not managed), read with ``Quantity.AsInt64`` (a value that is not a
whole number is skipped). What a namespace holds is the sum over its pods' card shares: memory in
MiB against the limit times the type's memory unit (HAMi's ``MemoryFactor``), cores in the type's
core units (percent of a card for NVIDIA). A card is refused when the pod's shares would take the
namespace past a limit (``FitQuota``; HAMi's reason ``ResourceQuotaNotFit``); Kubernetes' own quota
admission ignores these keys (it counts extended resources only under ``requests.``), so nothing
else enforces them.

Here a namespace may have several ResourceQuotas and each holds, as Kubernetes reads quotas (HAMi
keeps the last one seen per resource). What a namespace holds is what the cluster view charges its
pods (assigned pods, bound or not, from their annotations, as HAMi's quota counts a pod from its
``Filter`` on; and the placements the extender holds for pods being bound), so two pods judged one
after the other both count. The check is made on the cards the
engine chose: a percentage or whole-card request is charged those cards' memory.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from lightkube.config.kubeconfig import SingleConfig

from xpupool.engine.outcomes import NamespaceQuota
from xpupool.k8s.codec.quantity import parse_quantity
from xpupool.k8s.codec.resource_names import DEVICE_KINDS, DeviceKind
from xpupool.k8s.informers.kubeconfig import RawResourceQuota
from xpupool.k8s.informers.watch import Event, EventType, Informer
from xpupool.model.allocation import Allocation
from xpupool.model.device import Device
from xpupool.model.errors import RequestError
from xpupool.model.request import WHOLE

DeviceOf = Callable[[str], tuple[str, Device] | None]
"""A card's node and device by UUID, None for a card the pool lacks (``Engine.device``)."""

__all__ = ["QUOTA_PREFIX", "NamespaceQuotas", "QuotaLimits", "quota_limits"]

log = logging.getLogger(__name__)

QUOTA_PREFIX = "limits."
MAX_HARD = 256  # keys of one quota's spec.hard read; a real quota has a handful
_INT64 = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class _Managed:
    """A resource HAMi's quota plugin manages: its device type, and whether it counts memory."""

    kind: DeviceKind
    memory: bool


def _managed() -> dict[str, _Managed]:
    out: dict[str, _Managed] = {}
    for kind in DEVICE_KINDS:
        if kind.memory is not None:
            out[kind.memory] = _Managed(kind, True)
        if kind.cores is not None:
            out[kind.cores] = _Managed(kind, False)
    return out


MANAGED: dict[str, _Managed] = _managed()


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """One ResourceQuota's limits on managed resources: (resource name, limit in its units)."""

    namespace: str
    hard: tuple[tuple[str, int], ...]


def quota_limits(obj: Mapping[str, Any]) -> QuotaLimits:
    """An informer transform: the managed limits of a ResourceQuota object. Keys that are not
    ``limits.`` of a managed resource are ignored, as are values ``AsInt64`` cannot read (logged);
    a malformed object raises ``RequestError`` (the informer counts it as absent)."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("namespace"), str):
        raise RequestError("metadata.namespace", None, "a ResourceQuota is namespaced")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if hard is None:
        return QuotaLimits(meta["namespace"], ())
    if not isinstance(hard, Mapping) or len(hard) > MAX_HARD:
        raise RequestError("spec.hard", type(hard).__name__, f"expected at most {MAX_HARD} keys")
    out: list[tuple[str, int]] = []
    for key, value in hard.items():
        if not isinstance(key, str) or key[len(QUOTA_PREFIX) :] not in MANAGED:
            continue
        if not key.startswith(QUOTA_PREFIX):
            continue
        name = key[len(QUOTA_PREFIX) :]
        try:
            amount, _ = parse_quantity(f'spec.hard["{key}"]', value)
        except RequestError as exc:
            log.warning("ResourceQuota %s/%s: %s", meta["namespace"], meta.get("name"), exc)
            continue
        if amount.denominator != 1 or not 0 <= amount <= _INT64:  # AsInt64 cannot: HAMi skips it
            log.warning(
                "ResourceQuota %s/%s: %s=%s is not a whole number; not enforced",
                meta["namespace"],
                meta.get("name"),
                key,
                value,
            )
            continue
        out.append((name, int(amount)))
    return QuotaLimits(meta["namespace"], tuple(sorted(out)))


class NamespaceQuotas:
    """The managed limits of every namespace, kept by a ResourceQuota informer (:meth:`watch`)
    or fed events directly (:meth:`on_quota`). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._quotas: dict[str, QuotaLimits] = {}  # namespace/name -> its limits
        self._limits: dict[str, dict[str, int]] = {}  # namespace -> resource -> tightest limit
        self._informer: Informer[QuotaLimits] | None = None
        self._kinds: dict[tuple[str, str], DeviceKind | None] = {}

    # ------------------------------------------------------------------ the quotas
    def on_quota(self, event: Event[QuotaLimits]) -> None:
        """Consume a ResourceQuota informer event."""
        with self._lock:
            if event.type is EventType.DELETED:
                self._quotas.pop(event.key, None)
            else:
                self._quotas[event.key] = event.value
            namespace = event.value.namespace
            tightest: dict[str, int] = {}
            for quota in self._quotas.values():
                if quota.namespace == namespace:
                    for name, limit in quota.hard:
                        tightest[name] = min(limit, tightest.get(name, limit))
            if tightest:
                self._limits[namespace] = tightest
            else:
                self._limits.pop(namespace, None)

    def limits(self, namespace: str) -> dict[str, int]:
        """Resource name -> the tightest limit of the namespace's quotas, in the resource's
        units (empty: no managed quota)."""
        with self._lock:
            return dict(self._limits.get(namespace, {}))

    # ------------------------------------------------------------------ the check
    def refusal(
        self,
        namespace: str,
        placed: Sequence[Allocation],
        device: DeviceOf,
        holders: Mapping[str, tuple[str, tuple[Allocation, ...]]],
        uid: str,
    ) -> NamespaceQuota | None:
        """Why the pod ``uid`` of ``namespace`` may not hold ``placed`` (its card shares, whose
        cards ``device`` finds: ``Engine.device``), or None: what the namespace's other pods
        hold (``holders``: pod UID -> ``(namespace/name, allocations)``, the cluster view's)
        plus ``placed`` must stay within each limit of the namespace's quotas."""
        limits = self.limits(namespace)
        if not limits:
            return None
        asked = self.charge(device, placed)
        if not any(name in limits for name in asked):
            return None
        prefix = namespace + "/"
        held: dict[str, int] = {}
        for other, (name, allocations) in holders.items():
            if other != uid and name.startswith(prefix):
                for resource, amount in self.charge(device, allocations).items():
                    held[resource] = held.get(resource, 0) + amount
        for resource in sorted(asked):
            if resource not in limits:
                continue
            managed = MANAGED[resource]
            unit = managed.kind.memory_unit_mib if managed.memory else 1
            limit = limits[resource] * unit
            if held.get(resource, 0) + asked[resource] > limit:
                per_card = None if managed.memory else managed.kind.cores_per_card
                return NamespaceQuota(
                    namespace, resource, held.get(resource, 0), limit, asked[resource], per_card
                )
        return None

    def charge(self, device: DeviceOf, allocations: Iterable[Allocation]) -> dict[str, int]:
        """Resource name -> what ``allocations`` hold of it: MiB of memory, cores in the type's
        units (each share rounded up, as the annotation HAMi charges from writes it)."""
        out: dict[str, int] = {}
        for alloc in allocations:
            for share in alloc.devices:
                found = device(share.uuid)
                if found is None:
                    continue
                kind = self._kind(found[1])
                if kind is None:
                    continue
                if kind.memory is not None:
                    out[kind.memory] = out.get(kind.memory, 0) + share.memory_mib
                if kind.cores is not None:
                    cores = math.ceil(Fraction(share.core_permille * kind.cores_per_card, WHOLE))
                    out[kind.cores] = out.get(kind.cores, 0) + cores
        return out

    def _kind(self, device: Device) -> DeviceKind | None:
        """The device type whose memory and cores resources a card's shares count under: the
        one row of the table for its vendor (and chip) that has such resources."""
        key = (device.vendor, device.model)
        if key not in self._kinds:
            rows = [
                k
                for k in DEVICE_KINDS
                if k.vendor == device.vendor
                and (k.memory is not None or k.cores is not None)
                and k.model in (None, device.model)
            ]
            self._kinds[key] = rows[0] if len(rows) == 1 else None
        return self._kinds[key]

    # ------------------------------------------------------------------ the informer
    def watch(self, config: SingleConfig, *, resync_s: float = 300.0) -> NamespaceQuotas:
        """Start the ResourceQuota informer feeding this (all namespaces)."""
        if self._informer is not None:
            raise RuntimeError("the quotas are watched already")
        self._informer = Informer(
            config,
            RawResourceQuota,
            quota_limits,
            self.on_quota,
            resync_s=resync_s,
            name="resourcequotas",
        )
        self._informer.start()
        return self

    def wait_synced(self, timeout_s: float | None = None) -> bool:
        """True once the informer delivered its first list (always, when not watching)."""
        return self._informer is None or self._informer.wait_synced(timeout_s)

    def stop(self) -> None:
        if self._informer is not None:
            self._informer.stop()
            self._informer = None
