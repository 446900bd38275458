"""What the verbs read from kube-scheduler's arguments and the pods in them, and how they write a
score list back: node names from either form of ``ExtenderArgs``, the victims kube-scheduler
proposes, a pod's UID, priority and version key, and scores scaled onto the extender's range.
Plain functions on the wire types (``wire.py``) with no engine and no cluster, kept out of the
verbs so that ``verbs.py`` holds the decisions only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xpupool.k8s.extender.wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderPreemptionArgs,
    HostPriority,
    HostPriorityList,
)
from xpupool.model.errors import RequestError


def priorities(scores: Iterable[tuple[str, int]]) -> HostPriorityList:
    """The answer to prioritize, built without validating each entry again: names come from
    the request (validated there) and scores from :func:`scale` (0..10). One entry per node:
    at 1,000 nodes validating them was most of a prioritize call's time."""
    return HostPriorityList.model_construct(
        [HostPriority.model_construct(host=n, score=s) for n, s in scores]
    )


def node_names(args: ExtenderArgs) -> list[str]:
    if args.node_names is not None:
        return list(args.node_names)
    items = (args.nodes or {}).get("items") or []
    return [n for n in (name_of(i) for i in items) if n]


def name_of(node: object) -> str:
    if isinstance(node, Mapping):
        meta = node.get("metadata")
        if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
            return str(meta["name"])
    return ""


def scale(scores: Sequence[float]) -> list[int]:
    """Scores onto 0..MaxExtenderPriority, the best node 10, order kept (ties stay ties)."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return [MAX_EXTENDER_PRIORITY] * len(scores)
    span = high - low
    return [round(MAX_EXTENDER_PRIORITY * (s - low) / span) for s in scores]


def proposed_victims(args: ExtenderPreemptionArgs) -> dict[str, list[str]]:
    """Node -> the UIDs of the pods kube-scheduler would evict there."""
    out: dict[str, list[str]] = {}
    for node, meta in (args.node_name_to_meta_victims or {}).items():
        out[node] = [p.uid for p in (meta.pods or []) if p is not None] if meta else []
    for node, victims in (args.node_name_to_victims or {}).items():
        uids = []
        for pod in (victims.pods or []) if victims else []:
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            if isinstance(uid, str):
                uids.append(uid)
        out.setdefault(node, uids)
    return out


def demand_key(pod: object) -> str:
    """``uid@resourceVersion``: one version of one pod. Raises RequestError for a non-object."""
    if not isinstance(pod, Mapping):
        raise RequestError("Pod", pod, "expected the Pod object")
    meta = pod.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise RequestError("Pod.metadata", meta, "expected a JSON object")
    return f"{meta.get('uid', '')}@{meta.get('resourceVersion', '')}"


def uid_of(pod: object) -> str:
    """The pod's UID ("" when it has none)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    return str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""


def pod_priority(pod: object) -> int:
    """``spec.priority`` (what the Priority admission plugin resolved), 0 when absent."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
