"""The pods that wear a Kubernetes site's label (``xpupool.io/plane-site: NAME``), as the site's
pod watch reads each: the plane's own pod's state, and what the pod holds while it is bound.

A site watches its pods twice over: the pod watch follows the plane's own pods (their states
drive the job state machine, ``site.py``), and the bound pods' watch counts what every other pod
bound to its nodes holds (``foreign.py``). Both once selected the plane's own pods, so a restart
at 10,000 pods listed and decoded every one of them twice, the API server encoded them twice,
and each pod's every change came twice (docs/benchmarks.md, "A restart holding 10,000 pods").
The two selections are now disjoint and together select every pod: the pod watch takes every
pod with the site's label, the bound pods' watch every pod without it (``notin``). A pod with
the label that is no pod of the plane's (a label written by hand, a job label that is not a
number) is then the pod watch's to count as use, which :class:`SitePod` keeps room for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightkube import operators

from xpupool.k8s.informers.cluster_view import TERMINAL_PHASES, PodRecord, read_pod
from xpupool.k8s.informers.decoders import decode_pod_devices
from xpupool.k8s.site.pods import JOB, SITE, PodState, pod_state
from xpupool.model.errors import RequestError

__all__ = ["SitePod", "bound_record", "site_pod", "with_label", "without_label"]


def with_label(site: str) -> dict[str, Any]:
    """The pod watch's label selector: the pods with ``site``'s label."""
    return {SITE: site}


def without_label(site: str) -> dict[str, Any]:
    """The bound pods' watch's label selector: every other pod (``notin`` selects the pods
    without the label too)."""
    return {SITE: operators.not_in([site])}


@dataclass(frozen=True, slots=True)
class SitePod:
    """One pod with the site's label. ``state``: the plane's pod as :func:`pod_state` reads it,
    None when its labels are not what the plane writes (``unreadable`` says why); ``held``:
    where it is bound and what it holds while bound and not finished, None otherwise (what the
    bound pods' watch would have handed ``foreign.py``: that watch selects bound pods that have
    not finished)."""

    state: PodState | None
    held: PodRecord | None
    unreadable: str = ""  # empty for a pod with no job label: a service's, say


def bound_record(obj: Mapping[str, Any]) -> PodRecord | None:
    """The pod as the bound pods' watch reads it (``read_pod``), when that watch would select
    it (bound to a node, not finished); None when it would not."""
    spec = obj.get("spec")
    status = obj.get("status")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if not isinstance(node, str) or not node or phase in TERMINAL_PHASES:
        return None
    return read_pod(obj, decode_pod_devices)


def site_pod(obj: Mapping[str, Any]) -> SitePod:
    """The pod watch's reading of a pod with the site's label (never raises for labels that are
    not the plane's: such a pod is still counted as use)."""
    try:
        state: PodState | None = pod_state(obj)
        why = ""
    except RequestError as exc:
        # no job label: a pod of the plane's services (their Deployments' pods wear the label)
        # or anyone's; a job label the plane did not write is said
        state, why = None, str(exc) if JOB in _labels(obj) else ""
    return SitePod(state, bound_record(obj), why)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}
