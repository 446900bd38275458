"""The double-allocation audit (issue 24): grants summed per card against what the node registers.

Annotations are written in HAMi v2.10.0's formats (commit 4707fb02c91c): the JSON registration of
``pkg/device/devices.go`` ``MarshalNodeDevices`` and ``EncodePodSingleDevice``'s pod encoding."""

from __future__ import annotations

import json
from typing import Any

import hami_objects

from xpupool.k8s.codec.allocation_audit import audit_allocations

REGISTER = "hami.io/node-nvidia-register"
ALLOCATED = "hami.io/vgpu-devices-allocated"


def node(name: str, cards: int = 2, devmem: int = 16384, count: int = 10) -> dict[str, Any]:
    infos = [
        {
            "id": f"GPU-{name}-{j}",
            "index": j,
            "count": count,
            "devmem": devmem,
            "devcore": 100,
            "type": "NVIDIA Tesla T4",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for j in range(cards)
    ]
    return {"metadata": {"name": name, "annotations": {REGISTER: json.dumps(infos)}}}


def pod(name: str, node_name: str | None, *grants: tuple[str, int, int]) -> dict[str, Any]:
    """A pod of one container holding ``grants`` (uuid, MiB, cores %)."""
    text = "".join(f"{u},NVIDIA,{m},{c}:" for u, m, c in grants) + ";"
    spec = {"nodeName": node_name} if node_name else {}
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": {ALLOCATED: text}},
        "spec": spec,
    }


def test_a_fitting_set_is_clean() -> None:
    nodes = [node("n1")]
    pods = [
        pod("a", "n1", ("GPU-n1-0", 8192, 50)),
        pod("b", "n1", ("GPU-n1-0", 8192, 50)),
        pod("c", "n1", ("GPU-n1-1", 16384, 100)),
    ]
    report = audit_allocations(nodes, pods)
    assert report.double_allocations == 0 and report.over == ()
    assert (report.cards, report.pods, report.unreadable) == (2, 3, ())


def test_memory_over_a_card_is_caught_naming_card_and_pods() -> None:
    pods = [pod("a", "n1", ("GPU-n1-0", 12000, 10)), pod("b", "n1", ("GPU-n1-0", 8192, 10))]
    report = audit_allocations([node("n1")], pods)
    assert report.double_allocations == 1
    (finding,) = report.over
    assert (finding.uuid, finding.resource, finding.used, finding.capacity) == (
        "GPU-n1-0",
        "memory_mib",
        20192,
        16384,
    )
    assert finding.pods == ("default/a", "default/b")
    assert "GPU-n1-0" in finding.describe()


def test_cores_and_count_over_are_caught_on_one_card() -> None:
    nodes = [node("n1", count=2)]
    pods = [pod(p, "n1", ("GPU-n1-1", 100, 40)) for p in ("a", "b", "c")]
    report = audit_allocations(nodes, pods)
    assert {o.resource for o in report.over} == {"cores", "count"}
    assert report.double_allocations == 1  # one card, two resources


def test_two_whole_card_grants_of_one_card_are_a_double_allocation() -> None:
    pods = [pod(p, "n1", ("GPU-n1-0", 16384, 100)) for p in ("a", "b")]
    assert audit_allocations([node("n1")], pods).double_allocations == 1


def test_a_card_the_node_does_not_register_is_a_finding() -> None:
    report = audit_allocations([node("n1")], [pod("a", "n1", ("GPU-n2-0", 1, 1))])
    assert [o.resource for o in report.over] == ["unknown_card"]


def test_unbound_pods_hold_nothing() -> None:
    pods = [pod(p, None, ("GPU-n1-0", 16384, 100)) for p in ("a", "b")]
    report = audit_allocations([node("n1")], pods)
    assert report.double_allocations == 0 and report.pods == 0


def test_garbage_is_reported_not_raised() -> None:
    bad_node = {"metadata": {"name": "n2", "annotations": {REGISTER: "[{"}}}
    bad_pod = pod("a", "n1")
    bad_pod["metadata"]["annotations"][ALLOCATED] = "GPU-n1-0,NVIDIA,lots,1:;"
    report = audit_allocations(
        [node("n1"), bad_node, {"metadata": None}], [bad_pod, {"spec": "x"}, {}]
    )
    assert report.double_allocations == 0
    assert len(report.unreadable) == 2
    assert any("n2" in u and REGISTER in u for u in report.unreadable)
    assert any("default/a" in u and "usedmem" in u for u in report.unreadable)


def test_init_containers_are_charged_as_hami_charges_them() -> None:
    """Issue 56: a pod whose init container and app share a card holds the larger of the two
    there, one task; the audit summed them and reported double allocations on a cluster only
    HAMi scheduled (seen failing first: memory 100000 > 81920 on the init pod's card)."""
    init = [hami_objects.container("init", gpu="1", gpumem="60000")]
    app = [hami_objects.container("main", gpu="1", gpumem="20000")]
    card = "GPU-n-0"
    pods = [
        hami_objects.hami_pod("a", "n", init, app, [[(card, 60000, 30)], [(card, 20000, 30)]]),
        pod("b", "n", (card, 20000, 70)),
    ]
    report = audit_allocations([hami_objects.hami_node("n", count=2)], pods)
    assert (report.double_allocations, report.over) == (0, ())  # 60000 + 20000 MiB, 2 tasks
    pods.append(pod("c", "n", (card, 1000, 0)))
    (over,) = audit_allocations([hami_objects.hami_node("n", count=2)], pods).over  # 3 tasks
    assert (over.resource, over.used, over.capacity) == ("count", 3, 2)
    pods[-1] = pod("c", "n", (card, 30000, 0))  # a real double allocation is still caught
    report = audit_allocations([hami_objects.hami_node("n", count=3)], pods)
    assert [(o.resource, o.used) for o in report.over] == [("memory_mib", 110000)]


def test_a_finished_init_container_holds_its_card_no_more() -> None:
    init = [hami_objects.container("init", gpu="1", gpumem="70000")]
    app = [hami_objects.container("main", gpu="1", gpumem="10000")]
    grants = [[("GPU-n-1", 70000, 0)], [("GPU-n-0", 10000, 0)]]
    other = pod("b", "n", ("GPU-n-1", 40000, 0))  # placed once the init container was done
    nodes = [hami_objects.hami_node("n", cards=2)]
    done = hami_objects.hami_pod("a", "n", init, app, grants, [hami_objects.DONE])
    assert audit_allocations(nodes, [done, other]).over == ()
    running = hami_objects.hami_pod("a", "n", init, app, grants, [hami_objects.RUNNING])
    (over,) = audit_allocations(nodes, [running, other]).over
    assert (over.uuid, over.resource, over.used) == ("GPU-n-1", "memory_mib", 110000)
