"""Namespace ResourceQuotas on HAMi's card resources, read as HAMi v2.10.0's quota plugin reads
them (pkg/device/quota.go: ``limits.<memory or cores resource>``, ``AsInt64``; ``FitQuota``) and
held by the extender's filter and bind on a real ClusterView and engine (issue 56: a quota of
20,000 MiB of ``nvidia.com/gpumem`` let four pods of 8,000 MiB bind)."""

from __future__ import annotations

from typing import Any

import pytest
from extender_kit import QuietApi, no_decoder

from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderBindingArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.resource_quota import NamespaceQuotas, QuotaLimits, quota_limits
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model.errors import RequestError

from factories import gpu_node


def quota(namespace: str, name: str, hard: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": hard}}


def test_only_limits_of_managed_resources_read_as_whole_numbers() -> None:
    got = quota_limits(
        quota(
            "team",
            "q",
            {
                "limits.nvidia.com/gpumem": "20000",
                "limits.nvidia.com/gpucores": "2k",  # 2000
                "limits.hygon.com/dcumem": 1024,
                "requests.nvidia.com/gpumem": "1",  # not a key HAMi reads
                "limits.nvidia.com/gpu": "4",  # a count: not managed
                "limits.cpu": "8",
                "limits.amd.com/gpumem": "1.5",  # AsInt64 cannot: skipped
                "limits.amd.com/gpucores": "lots",  # not a quantity: skipped
            },
        )
    )
    assert got == QuotaLimits(
        "team",
        (("hygon.com/dcumem", 1024), ("nvidia.com/gpucores", 2000), ("nvidia.com/gpumem", 20000)),
    )
    assert quota_limits({"metadata": {"namespace": "a", "name": "q"}}).hard == ()
    with pytest.raises(RequestError):
        quota_limits({"metadata": {"name": "q"}, "spec": {"hard": {}}})
    with pytest.raises(RequestError):
        quota_limits(quota("a", "q", {f"k{i}": "1" for i in range(300)}))


def _event(kind: EventType, namespace: str, name: str, hard: dict[str, Any]) -> Event[QuotaLimits]:
    return Event(
        kind, f"{namespace}/{name}", f"uid-{name}", quota_limits(quota(namespace, name, hard))
    )


def test_the_tightest_of_a_namespaces_quotas_holds() -> None:
    quotas = NamespaceQuotas()
    quotas.on_quota(_event(EventType.ADDED, "team", "a", {"limits.nvidia.com/gpumem": "20000"}))
    quotas.on_quota(_event(EventType.ADDED, "team", "b", {"limits.nvidia.com/gpumem": "9000"}))
    quotas.on_quota(_event(EventType.ADDED, "other", "a", {"limits.nvidia.com/gpucores": "50"}))
    assert quotas.limits("team") == {"nvidia.com/gpumem": 9000}
    quotas.on_quota(_event(EventType.DELETED, "team", "b", {"limits.nvidia.com/gpumem": "9000"}))
    assert quotas.limits("team") == {"nvidia.com/gpumem": 20000}
    quotas.on_quota(_event(EventType.MODIFIED, "team", "a", {"limits.cpu": "1"}))
    assert quotas.limits("team") == {} and quotas.limits("other") == {"nvidia.com/gpucores": 50}


def setup(hard: dict[str, Any], *, choose: bool = True) -> Extender:
    view = ClusterView(no_decoder, no_decoder, profile="binpack")
    node = gpu_node("a", count=2, group_size=0)  # two A100 80GB: room for every pod below
    view.on_node(Event(EventType.ADDED, "a", "uid-a", NodeRecord(node, True)))
    quotas = NamespaceQuotas()
    quotas.on_quota(_event(EventType.ADDED, "team", "cards", hard))
    return Extender(view, QuietApi(), lambda n, d, a: {}, choose=choose, quotas=quotas)


def bind(ext: Extender, p: dict[str, Any]) -> str:
    """Bind ``p`` to node ``a`` (the apiserver holds it): the error, '' when bound."""
    assert isinstance(ext.api, QuietApi)
    ext.api.add(p)
    meta = p["metadata"]
    args = ExtenderBindingArgs(
        PodName=meta["name"], PodNamespace=meta["namespace"], PodUID=meta["uid"], Node="a"
    )
    return ext.bind(args).error


def pod(name: str, limits: dict[str, str], namespace: str = "team") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1"}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


def place(ext: Extender, p: dict[str, Any]) -> str:
    """Filter then bind ``p``: '' when bound, else the filter's reason for node ``a``."""
    result = ext.filter(ExtenderArgs(Pod=p, NodeNames=["a"]))
    if not result.node_names:
        return (result.failed_and_unresolvable_nodes or result.failed_nodes or {})["a"]
    error = bind(ext, p)
    assert not error, error
    return ""


MEM = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}


@pytest.mark.parametrize("choose", [True, False])
def test_a_namespace_holds_no_more_card_memory_than_its_quota(choose: bool) -> None:
    """20,000 MiB, pods of 8,000 MiB: two bind, the third is refused with the quota (no
    preemption: FailedAndUnresolvable); another namespace is not capped."""
    ext = setup({"limits.nvidia.com/gpumem": "20000"}, choose=choose)
    assert place(ext, pod("p0", MEM)) == ""
    assert place(ext, pod("p1", MEM)) == ""
    result = ext.filter(ExtenderArgs(Pod=pod("p2", MEM), NodeNames=["a"]))
    assert not result.node_names and not result.failed_nodes
    why = (result.failed_and_unresolvable_nodes or {})["a"]
    assert why == (
        "xpupool: quota of namespace team: nvidia.com/gpumem 16000 of 20000 MiB held, "
        "the pod asks 8000"
    )
    assert place(ext, pod("elsewhere", MEM, namespace="free")) == ""
    small = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    assert place(ext, pod("p3", small)) == ""  # 20,000 exactly


def test_cores_count_in_hamis_percent_and_every_card_of_a_pod_counts() -> None:
    ext = setup({"limits.nvidia.com/gpucores": "100"})
    two = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"}
    assert place(ext, pod("p0", two)) == ""  # 60 % of a card
    why = place(ext, pod("p1", two))  # 60 + 60 > 100
    assert "nvidia.com/gpucores 60 of 100 (100 a card) held, the pod asks 60" in why, why
    one = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "40"}
    assert place(ext, pod("p2", one)) == ""


def test_a_bind_without_its_filter_is_held_to_the_quota_too() -> None:
    ext = setup({"limits.nvidia.com/gpumem": "10000"})
    assert place(ext, pod("p0", MEM)) == ""
    assert "quota of namespace team" in bind(ext, pod("p1", MEM))  # no filter before it
