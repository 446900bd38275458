"""Kubectl users' gated pods of one owner with a PodGroup: admitted together, as one gang job, or
not at all (issue 49, part 3; docs/kubernetes.md, "Gangs of kubectl pods").

A gated pod that names a group (scheduler-plugins' ``scheduling.x-k8s.io/pod-group`` label, or
xpupool's ``xpupool.io/gang`` and ``xpupool.io/gang-size`` annotations: the extender's reader,
``k8s/informers/pod_groups.py``'s :func:`group_claim`) is held here, unsubmitted, until the group has
its size in gated pods (the PodGroup's ``spec.minMember``, read with the extender's
:class:`PodGroupSizes`, or the annotation's size). Then the site submits one job of that many
replicas with ``gang`` set, one replica per pod (ordered by name), through the one submission
path: the cycle admits all of its replicas or none, and the gates of all are removed together.
The extender then places them as one group (it reads the same label). Every member must have a
controller (``metadata.ownerReferences`` with ``controller: true``: a Job, a ReplicaSet of a
Deployment, ...), the same as the group's first pod: a pod of another owner, or of none, is
refused. Held members live only in memory: a restarted plane's watch lists them again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xpupool.k8s.informers.pod_groups import GroupClaim, group_claim
from xpupool.model.errors import RequestError

__all__ = ["FormingGangs", "controller_uid"]

MAX_UID_CHARS = 64


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the pod's controller (its ownerReference with ``controller: true``), or None."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            uid = ref.get("uid")
            if isinstance(uid, str) and 0 < len(uid) <= MAX_UID_CHARS:
                return uid
    return None


@dataclass(slots=True)
class _Forming:
    owner: str
    size: int
    members: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # uid -> pod


class FormingGangs:
    """The gated pods of groups not yet whole, per (namespace, group). Used from the gated
    informer's thread alone. ``size_of(namespace, group)`` is the PodGroup's minMember (raises
    RequestError when it cannot be read)."""

    def __init__(self, size_of: Callable[[str, str], int]) -> None:
        self._size_of = size_of
        self._groups: dict[tuple[str, str], _Forming] = {}

    @staticmethod
    def claim(obj: Mapping[str, Any]) -> GroupClaim | None:
        """The group the pod names, or None (a pod of its own). Raises RequestError naming the
        label or annotation when it is bad."""
        return group_claim(obj)

    def add(self, claim: GroupClaim, obj: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
        """Hold gated pod ``obj`` of ``claim``'s group; once the group has its size, return its
        members (ordered by name; the group is forgotten here), else None. Raises RequestError
        for a pod with no controller or another controller than the group's."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        owner = controller_uid(obj)
        where = f"PodGroup {claim.namespace}/{claim.name}"
        if owner is None:
            why = f"a pod of {where} is admitted with its owner's other pods: it has no controller"
            raise RequestError("metadata.ownerReferences", None, why)
        key = (claim.namespace, claim.name)
        forming = self._groups.get(key)
        if forming is None:
            size = claim.size if claim.size is not None else self._size_of(*key)
            forming = self._groups[key] = _Forming(owner, size)
        elif owner != forming.owner:
            why = f"{where}'s pods waiting are of owner {forming.owner}: a gang is one owner's pods"
            raise RequestError("metadata.ownerReferences", owner, why)
        forming.members[uid] = obj
        if len(forming.members) < forming.size:
            return None
        del self._groups[key]
        return sorted(forming.members.values(), key=lambda o: str(o["metadata"].get("name", "")))

    def drop(self, uid: str) -> None:
        """A held pod deleted (or its gate removed by someone else): no longer a member."""
        for key, forming in list(self._groups.items()):
            if forming.members.pop(uid, None) is not None and not forming.members:
                del self._groups[key]

    def holds(self, uid: str) -> bool:
        return any(uid in f.members for f in self._groups.values())
