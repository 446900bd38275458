"""Which gang a pod belongs to and how big it is (the reader the extender and the plane's site
share): a pod's group comes from its ``scheduling.x-k8s.io/pod-group`` label, the size from that
PodGroup's ``spec.minMember`` (scheduler-plugins ``apis/scheduling/v1alpha1/types.go``,
``PodGroupLabel`` and ``PodGroupSpec.MinMember``, commit 903da7df82cb8794dda8f2d510ba1156111662dd),
read with a GET per group and a short cache (:class:`PodGroupSizes`); or from xpupool's
annotations ``xpupool.io/gang`` (the group's name) and ``xpupool.io/gang-size``. Groups are per
namespace, as coscheduling's ``GetPodGroupFullName``. Every field is checked as hostile input.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xpupool.model.errors import RequestError

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""scheduler-plugins' ``v1alpha1.PodGroupLabel`` (``scheduling.GroupName + "/pod-group"``)."""
GANG_ANNOTATION = "xpupool.io/gang"
GANG_SIZE_ANNOTATION = "xpupool.io/gang-size"
MAX_GANG_SIZE = 1024
"""Far above any real gang (DESIGN's figure is 64); a larger claim is refused, not reserved."""
MAX_NAME_CHARS = 253
COMPLETED_KEPT = 4096
PODGROUP_TTL_S = 5.0

SizeLookup = Callable[[str, str], int]
"""(namespace, PodGroup name) -> its minMember; raises RequestError when it cannot be read."""


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """What a pod says about its group: ``namespace``/``name``, and ``size`` when the pod gives it
    (xpupool's annotation; None: the PodGroup's minMember)."""

    namespace: str
    name: str
    size: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def group_claim(pod: object) -> GroupClaim | None:
    """The pod's group, or None when it belongs to none. Raises RequestError naming the label or
    annotation for a bad name, a size that is not a whole number in 1..MAX_GANG_SIZE, a size
    without a group, or a label and an annotation naming two groups."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    assert isinstance(labels, Mapping) and isinstance(annotations, Mapping)
    label = labels.get(POD_GROUP_LABEL)
    ours = annotations.get(GANG_ANNOTATION)
    size_text = annotations.get(GANG_SIZE_ANNOTATION)
    if label is None and ours is None:
        if size_text is not None:
            raise RequestError(
                f"metadata.annotations[{GANG_SIZE_ANNOTATION!r}]",
                _short(size_text),
                f"a gang size needs a group: set {GANG_ANNOTATION!r} too",
            )
        return None
    if label is not None:
        _check_name(f"metadata.labels[{POD_GROUP_LABEL!r}]", label)
    if ours is not None:
        _check_name(f"metadata.annotations[{GANG_ANNOTATION!r}]", ours)
    if label is not None and ours is not None and label != ours:
        raise RequestError(
            f"metadata.annotations[{GANG_ANNOTATION!r}]",
            _short(ours),
            f"names another group than the label {POD_GROUP_LABEL!r} ({_short(label)!r})",
        )
    name = str(ours if ours is not None else label)
    size: int | None = None
    if size_text is not None:
        size = parse_size(f"metadata.annotations[{GANG_SIZE_ANNOTATION!r}]", size_text)
    elif ours is not None and label is None:
        raise RequestError(
            f"metadata.annotations[{GANG_SIZE_ANNOTATION!r}]",
            None,
            f"missing: a group named by {GANG_ANNOTATION!r} needs its size",
        )
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    return GroupClaim(namespace, name, size)


def parse_size(field_name: str, value: object) -> int:
    """A gang size: decimal digits (text) or an int, 1..MAX_GANG_SIZE."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and 0 < len(value) <= 10 and value.isascii() and value.isdigit():
        number = int(value)
    else:
        number = None
    if number is None:
        raise RequestError(field_name, _short(value), "expected a whole number")
    if not 1 <= number <= MAX_GANG_SIZE:
        raise RequestError(field_name, number, f"must be in 1..{MAX_GANG_SIZE}")
    return number


def min_member(obj: object, where: str) -> int:
    """``spec.minMember`` of a PodGroup object (its JSON); omitted is 0 in Go, which the CRD's
    ``minimum: 1`` would refuse, so it is refused here too."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    value = spec.get("minMember") if isinstance(spec, Mapping) else None
    if value is None:
        raise RequestError(f"{where}.spec.minMember", None, "missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{where}.spec.minMember", _short(value), "expected an integer")
    return parse_size(f"{where}.spec.minMember", value)


def _check_name(field_name: str, value: object) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise RequestError(field_name, _short(value), f"expected a name of 1..{MAX_NAME_CHARS}")


def _short(value: object) -> object:
    return value[:64] + "..." if isinstance(value, str) and len(value) > 64 else value


class PodGroupSizes:
    """minMember per PodGroup, read with a GET and kept ``ttl_s``. A GET per group rather than a
    watch of all PodGroups: the extender needs only the groups of pods it is asked about, at most
    once per few seconds each; it holds no copy of every PodGroup of the cluster, and a cluster
    without the CRD answers 404 for that pod (a clear Error) instead of a watch that fails forever.
    A changed minMember is seen within ``ttl_s``."""

    def __init__(
        self,
        get: Callable[[str, str], dict[str, Any]],
        *,
        ttl_s: float = PODGROUP_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        kept: int = COMPLETED_KEPT,
    ) -> None:
        self._get = get
        self.ttl_s = ttl_s
        self._clock = clock
        self._kept = kept
        self._cache: OrderedDict[tuple[str, str], tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, namespace: str, name: str) -> int:
        key = (namespace, name)
        now = self._clock()
        with self._lock:
            found = self._cache.get(key)
            if found is not None and now - found[0] < self.ttl_s:
                return found[1]
        size = min_member(self._get(namespace, name), f"PodGroup {namespace}/{name}")
        with self._lock:
            self._cache[key] = (now, size)
            self._cache.move_to_end(key)
            while len(self._cache) > self._kept:
                self._cache.popitem(last=False)
        return size


def lightkube_podgroup_getter(client: Any) -> Callable[[str, str], dict[str, Any]]:
    """``get(namespace, name)`` of a PodGroup (``scheduling.x-k8s.io/v1alpha1``) on a lightkube
    client; raises RequestError naming the PodGroup when the API refuses (404: no such group, or
    the CRD is not installed)."""
    from lightkube.core.exceptions import ApiError
    from lightkube.generic_resource import create_namespaced_resource

    kind = create_namespaced_resource(
        "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", verbs=["get"]
    )

    def get(namespace: str, name: str) -> dict[str, Any]:
        try:
            obj = client.get(kind, name, namespace=namespace)
        except ApiError as exc:
            status = exc.status
            why = f"{status.code} {status.reason or ''}".strip()
            raise RequestError(
                f"PodGroup {namespace}/{name}", None, f"cannot be read: {why}"
            ) from None
        return dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)

    return get
