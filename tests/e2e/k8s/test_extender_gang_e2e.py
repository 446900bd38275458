"""Gangs through xpupool's extender behind a real kube-scheduler (v1.36) on a real kube-apiserver:
a group binds all or none. A group of 8 that fits binds on cards that hold it; a group of which
only 7 fit never binds, says so in its events, and holds nothing a plain pod could use; a group
whose 8th pod never comes has every place released when its binds time out, and binds once the
8th is created.

Groups come from scheduler-plugins' PodGroup (``scheduling.x-k8s.io/v1alpha1``, minMember) through
the ``scheduling.x-k8s.io/pod-group`` label, or from xpupool's ``xpupool.io/gang`` and
``xpupool.io/gang-size`` annotations. A bare apiserver has no PodGroup kind: the module installs a
minimal CRD for it, with only the field the extender reads (``spec.minMember``, as in
scheduler-plugins ``config/crd/bases/scheduling.x-k8s.io_podgroups.yaml``, commit
903da7df82cb8794dda8f2d510ba1156111662dd).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster import ExtenderProcess, K8sCluster, extender_stack, free_port
from test_extender_e2e import (
    A100,
    NS,
    add_nodes,
    bound,
    check_no_overcommit,
    create,
    delete_pods,
    every_verb,
    gpu_pod,
    hami_node,
    reasons,
    remove_nodes,
    shares,
)

pytestmark = pytest.mark.k8s

GANG_WAIT_S = 4.0
"""The extender's ``--gang-wait``: short, so a timing-out group shows quickly (kube-scheduler's
httpTimeout for the extender is 10 s here)."""

PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "names": {
            "kind": "PodGroup",
            "listKind": "PodGroupList",
            "plural": "podgroups",
            "singular": "podgroup",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "minMember": {
                                        "type": "integer",
                                        "format": "int32",
                                        "minimum": 1,
                                    }
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    port = free_port()
    ext = every_verb(port, preempt=False)

    def add_podgroup_crd(kc: K8sCluster) -> None:
        r = kc.api.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=PODGROUP_CRD
        )
        assert r.status_code == 201, r.text
        wait_established(kc, PODGROUP_CRD["metadata"]["name"])  # type: ignore[index]

    extra = ("--gang-wait", str(GANG_WAIT_S))
    tmp = tmp_path_factory.mktemp("gang")
    with extender_stack(tmp, port, ext, extra, add_podgroup_crd) as both:
        yield both


def wait_established(kc: K8sCluster, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = kc.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.1)
    raise AssertionError(f"CRD {name} not established")


def pod_group(kc: K8sCluster, name: str, min_member: int) -> None:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": min_member},
    }
    r = kc.api.post(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups", json=body)
    assert r.status_code == 201, r.text


def member(name: str, limits: dict[str, str], group: str, size: int | None) -> dict[str, Any]:
    """A gang member: the PodGroup label when ``size`` is None, else xpupool's annotations."""
    if size is None:
        p = gpu_pod(name, limits)
        p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
        return p
    return gpu_pod(name, limits, {"xpupool.io/gang": group, "xpupool.io/gang-size": str(size)})


def unbound(kc: K8sCluster) -> list[str]:
    items = kc.api.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
    return sorted(p["metadata"]["name"] for p in items if not p["spec"].get("nodeName"))


def test_a_pod_group_of_eight_that_fits_binds_all_on_cards_that_hold_them(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """8 members of 40 GB on 2 nodes of 2 A100 80 GB: all bind, two per card, no card over."""
    kc, _ = stack
    add_nodes(kc, hami_node("pg-a", A100, 2), hami_node("pg-b", A100, 2))
    pod_group(kc, "pg8", 8)
    try:
        names = [f"pg8-{i}" for i in range(8)]
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}
        create(kc, *(member(n, limits, "pg8", None) for n in names))
        pods = bound(kc, names)
        check_no_overcommit(kc, pods, A100[1])
        per_card: dict[str, int] = {}
        for p in pods.values():
            for uuid, mib, _ in shares(p):
                assert mib == 40000
                per_card[uuid] = per_card.get(uuid, 0) + 1
        assert sorted(per_card.values()) == [2, 2, 2, 2], per_card
    finally:
        delete_pods(kc)
        remove_nodes(kc, "pg-a", "pg-b")


def test_a_gang_of_eight_where_seven_fit_waits_and_holds_nothing(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    """Whole cards, 4 + 3 of them: none of the 8 binds, each says 'gang ...: 7 of 8 fit', and
    plain pods of 4 and 3 cards, taking exactly what the 7 would have, bind."""
    kc, _ = stack
    add_nodes(kc, hami_node("seven-a", A100, 4, split=1), hami_node("seven-b", A100, 3, split=1))
    try:
        names = [f"g7-{i}" for i in range(8)]
        create(kc, *(member(n, {"nvidia.com/gpu": "1"}, "g7", 8) for n in names))
        for name in names:
            why = reasons(kc, name)
            assert "gang default/g7: 7 of 8 fit" in why, why
        assert unbound(kc) == names
        create(
            kc,
            gpu_pod("plain-4", {"nvidia.com/gpu": "4"}),
            gpu_pod("plain-3", {"nvidia.com/gpu": "3"}),
        )
        pods = bound(kc, ["plain-4", "plain-3"])
        assert pods["plain-4"]["spec"]["nodeName"] == "seven-a"
        assert pods["plain-3"]["spec"]["nodeName"] == "seven-b"
        time.sleep(1)
        assert unbound(kc) == names
    finally:
        delete_pods(kc)
        remove_nodes(kc, "seven-a", "seven-b")


def fits_by_hand(proc: ExtenderProcess, limits: dict[str, str], nodes: list[str]) -> list[str]:
    """The extender's own /filter for a pod no scheduler owns: where it would fit now, asked
    node by node (asked several, filter answers the one the engine would choose). The probe has no
    UID, as no pod from the apiserver lacks one: its answers hold nothing for it."""
    p = gpu_pod("probe", limits)
    p["metadata"].pop("uid", None)
    fits = []
    for node in nodes:
        body = {"Pod": p, "Nodes": None, "NodeNames": [node]}
        r = httpx.post(f"http://127.0.0.1:{proc.port}/filter", json=body, timeout=10)
        assert r.status_code == 200, r.text
        fits += list(r.json().get("NodeNames") or [])
    return fits


def test_a_member_that_never_comes_releases_the_group_then_the_eighth_binds_all(
    stack: tuple[K8sCluster, ExtenderProcess],
) -> None:
    kc, proc = stack
    nodes = ["late-a", "late-b"]
    add_nodes(kc, *(hami_node(n, A100, 4, split=1) for n in nodes))
    pod_group(kc, "late8", 8)
    try:
        names = [f"late8-{i}" for i in range(8)]
        whole = {"nvidia.com/gpu": "1"}
        started = time.monotonic()
        create(kc, *(member(n, whole, "late8", None) for n in names[:7]))
        # the group's 8 places are held while the 7 wait in bind: no node takes 4 more cards...
        deadline = time.monotonic() + GANG_WAIT_S
        while fits_by_hand(proc, {"nvidia.com/gpu": "4"}, nodes) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fits_by_hand(proc, {"nvidia.com/gpu": "4"}, nodes) == [], "places not held"
        # ...until their binds time out: then every place goes back
        while fits_by_hand(proc, {"nvidia.com/gpu": "4"}, nodes) != nodes:
            assert time.monotonic() - started < 3 * GANG_WAIT_S + 5, "places never released"
            time.sleep(0.05)
        why = reasons(kc, names[0])
        assert "members reached bind" in why, why
        assert unbound(kc) == names[:7]  # back to pending, none bound alone
        create(kc, member(names[7], whole, "late8", None))
        pods = bound(kc, names, timeout_s=90)
        check_no_overcommit(kc, pods, A100[1])
        cards = [uuid for p in pods.values() for uuid, _, _ in shares(p)]
        assert len(set(cards)) == 8
    finally:
        delete_pods(kc)
        remove_nodes(kc, *nodes)
