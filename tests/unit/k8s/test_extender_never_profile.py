"""The extender's "never fits" verdict reads the pool as the profile's filters do.

A profile may turn a selector filter off (here ``DeviceUuid``: a pod's HAMi UUID list is then not
checked). The verdict cache was built without the profile's disabled filters, so a pod that fits
the pool as the profile filters it, only not now (its card is full), was answered unresolvable
("no such card") and kube-scheduler never tried preemption for it, nor kept it for the card to
free. The verdict now comes from the engine host, built with the profile's settings, as the
server's is (issue 44, item 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender_kit import QuietApi, no_decoder

from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node


def whole_card_pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    meta["resourceVersion"] = "1"
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_a_pod_the_profile_would_fit_is_not_called_unresolvable() -> None:
    profile = replace(
        BUILTIN_PROFILES[DEFAULT_PROFILE],
        name="no-uuid-check",
        disabled_filters=frozenset({"DeviceUuid"}),
    )
    view = ClusterView(no_decoder, no_decoder, profile=profile)
    node = gpu_node("n", count=1, group_size=0)
    view.on_node(Event(EventType.ADDED, "n", "uid-n", NodeRecord(node, True)))
    ext = Extender(view, QuietApi(), lambda node, demand, allocs: {})
    first = ext.filter(ExtenderArgs(Pod=whole_card_pod("first"), NodeNames=["n"]))
    assert first.node_names == ["n"]  # it holds the one card now
    asks_other_uuid = whole_card_pod("second", {"nvidia.com/use-gpuuuid": "GPU-elsewhere"})
    second = ext.filter(ExtenderArgs(Pod=asks_other_uuid, NodeNames=["n"]))
    assert not second.node_names  # the card is full now
    assert not second.failed_and_unresolvable_nodes, second.failed_and_unresolvable_nodes
    assert second.failed_nodes and "n" in second.failed_nodes
