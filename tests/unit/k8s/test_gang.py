"""gang.py's bookkeeping on a real ClusterView and engine: group claims read from hostile labels and
annotations, one filter reserving the whole group or nothing, members filtered to their places,
binds that wait for the whole group, and every place released on a timeout or when members stop
coming. The same Gangs object the extender drives; no API server (the e2e tests have one)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from xpupool.engine.outcomes import (
    GangBindTimeout,
    GangNeedsUid,
    GangNoFreePlace,
    GangOtherDevices,
    GangPlaceElsewhere,
    GangReleased,
    GangSizeMismatch,
    GangTooFewFit,
    render,
)
from xpupool.k8s.codec.pod_request import ANNOTATION_REQUEST, PodDemand, pod_demand
from xpupool.k8s.extender.gang import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    MAX_GANG_SIZE,
    POD_GROUP_LABEL,
    Gangs,
    GroupClaim,
    PodGroupSizes,
    group_claim,
    min_member,
)
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs, ExtenderFilterResult
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model.device import Node
from xpupool.model.errors import RequestError

from factories import gpu_node


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def view_with(*nodes: Node) -> ClusterView:
    view = ClusterView(no_decoder, no_decoder, profile="binpack")
    for node in nodes:
        view.on_node(Event(EventType.ADDED, node.name, f"uid-{node.name}", NodeRecord(node, True)))
    return view


def pod(
    name: str,
    labels: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    gpus: str = "1",
    mem: str | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def ours(group: str, size: object) -> dict[str, Any]:
    return {GANG_ANNOTATION: group, GANG_SIZE_ANNOTATION: size}


def free_cards(view: ClusterView) -> int:
    with view.engine_locked() as engine:
        s = engine.state
        return int((s.dev_mem_free[s.dev_present] == s.dev_mem_total[s.dev_present]).sum())


# ---------------------------------------------------------------------- claims
def test_claims_from_our_annotations_and_from_the_pod_group_label() -> None:
    assert group_claim(pod("a", annotations=ours("g", "8"))) == GroupClaim("ns", "g", 8)
    assert group_claim(pod("a", labels={POD_GROUP_LABEL: "pg"})) == GroupClaim("ns", "pg", None)
    both = pod("a", labels={POD_GROUP_LABEL: "pg"}, annotations=ours("pg", "3"))
    assert group_claim(both) == GroupClaim("ns", "pg", 3)
    assert group_claim(pod("a")) is None
    assert group_claim("not a pod") is None


@pytest.mark.parametrize(
    ("labels", "annotations", "field", "why"),
    [
        ({}, ours("g", "eight"), GANG_SIZE_ANNOTATION, "whole number"),
        ({}, ours("g", "0"), GANG_SIZE_ANNOTATION, f"1..{MAX_GANG_SIZE}"),
        ({}, ours("g", "-1"), GANG_SIZE_ANNOTATION, "whole number"),
        ({}, ours("g", "1e3"), GANG_SIZE_ANNOTATION, "whole number"),
        ({}, ours("g", "99999999999999999999"), GANG_SIZE_ANNOTATION, "whole number"),
        ({}, ours("g", str(MAX_GANG_SIZE + 1)), GANG_SIZE_ANNOTATION, f"1..{MAX_GANG_SIZE}"),
        ({}, ours("g", 8), GANG_SIZE_ANNOTATION, ""),  # JSON int: kube refuses; fine here
        ({}, {GANG_ANNOTATION: "g"}, GANG_SIZE_ANNOTATION, "needs its size"),
        ({}, {GANG_SIZE_ANNOTATION: "4"}, GANG_SIZE_ANNOTATION, "needs a group"),
        ({}, ours("x" * 300, "2"), GANG_ANNOTATION, "name of 1..253"),
        ({}, ours("", "2"), GANG_ANNOTATION, "name of 1..253"),
        ({POD_GROUP_LABEL: 7}, {}, POD_GROUP_LABEL, "name"),
        ({POD_GROUP_LABEL: "a"}, ours("b", "2"), GANG_ANNOTATION, "another group"),
    ],
)
def test_hostile_claims_are_refused_naming_the_field(
    labels: dict[str, Any], annotations: dict[str, Any], field: str, why: str
) -> None:
    if not why:  # an int where text belongs is read, within bounds
        assert group_claim(pod("a", labels, annotations)) == GroupClaim("ns", "g", 8)
        return
    with pytest.raises(RequestError) as err:
        group_claim(pod("a", labels, annotations))
    assert field in err.value.field and why in str(err.value)


def test_min_member_is_read_from_the_pod_group_and_checked() -> None:
    assert min_member({"spec": {"minMember": 4}}, "pg") == 4
    bads: list[dict[str, Any]] = [
        {},
        {"spec": {}},
        {"spec": {"minMember": "4"}},
        {"spec": {"minMember": True}},
        {"spec": "x"},
    ]
    for bad in bads:
        with pytest.raises(RequestError, match=r"pg\.spec\.minMember"):
            min_member(bad, "pg")
    with pytest.raises(RequestError, match=r"1\.\.1024"):
        min_member({"spec": {"minMember": 1 << 31}}, "pg")


def test_pod_group_sizes_are_cached_for_a_few_seconds() -> None:
    calls: list[tuple[str, str]] = []
    size = {"v": 4}

    def get(ns: str, name: str) -> dict[str, Any]:
        calls.append((ns, name))
        return {"spec": {"minMember": size["v"]}}

    clock = Clock()
    sizes = PodGroupSizes(get, ttl_s=5, clock=clock)
    assert sizes("ns", "pg") == 4 and sizes("ns", "pg") == 4
    assert calls == [("ns", "pg")]
    size["v"] = 6
    clock.now += 6
    assert sizes("ns", "pg") == 6 and len(calls) == 2


# ---------------------------------------------------------------------- filter
def demand_of(p: dict[str, Any]) -> PodDemand:
    return pod_demand(p)


def judge(gangs: Gangs, view: ClusterView, p: dict[str, Any], names: list[str]) -> Any:
    claim = group_claim(p)
    assert claim is not None
    with view.engine_locked() as engine:
        return gangs.judge(
            engine, claim, gangs.size_of(claim), demand_of(p), p["metadata"]["uid"], names
        )


def test_first_member_reserves_the_whole_group_each_member_gets_one_place() -> None:
    view = view_with(gpu_node("a", count=4), gpu_node("b", count=4), gpu_node("c", count=4))
    gangs = Gangs(view, wait_s=5, clock=Clock())
    names = ["a", "b", "c"]
    members = [pod(f"m{i}", annotations=ours("g", "6")) for i in range(7)]
    verdict = judge(gangs, view, members[0], names)
    held = gangs.held()["ns/g"]
    assert len(held) == 6 and free_cards(view) == 6  # one whole card each, binpacked
    assert view.charges() == {}  # places held for no pod yet: preemption names none of them
    per_node = {n: sum(s.node == n for s in held) for n in names}
    assert verdict.fits == [held[0].node] and held[0].member == "uid-m0"
    assert verdict.failed == {}  # its node alone: the others' reasons are never read
    assert judge(gangs, view, members[0], names).fits == verdict.fits  # filtered again: same
    sent = [verdict.fits] + [judge(gangs, view, p, names).fits for p in members[1:6]]
    assert all(len(f) == 1 for f in sent)  # each member to its own place's node only
    assert {n: sum(f == [n] for f in sent) for n in names} == per_node  # never more than held
    assert len(gangs.held()["ns/g"]) == 6 and free_cards(view) == 6  # nothing more taken
    seventh = judge(gangs, view, members[6], names)
    assert seventh.fits == [] and seventh.failed["a"] == GangNoFreePlace("ns/g")
    no_uid = pod("anon", annotations=ours("g", "6"))
    no_uid["metadata"]["uid"] = ""
    assert judge(gangs, view, no_uid, names).failed["a"] == GangNeedsUid()
    only_c = judge(gangs, view, pod("late", annotations=ours("g", "6")), ["c"])
    assert only_c.fits == [] and only_c.failed["c"] == GangNoFreePlace("ns/g")
    assert render(only_c.failed["c"]) == "gang ns/g: no free place of the group on these nodes"
    other = judge(gangs, view, pod("x", annotations=ours("g", "7")), ["a"])
    assert other.fits == [] and other.failed["a"] == GangSizeMismatch("ns/g", 7, 6)
    bigger = judge(gangs, view, pod("y", annotations=ours("g", "6"), mem="1000"), ["a"])
    assert bigger.fits == [] and bigger.failed["a"] == GangOtherDevices("ns/g")


def test_a_group_that_does_not_fit_is_refused_everywhere_and_holds_nothing() -> None:
    view = view_with(gpu_node("a", count=4), gpu_node("b", count=3))
    gangs = Gangs(view, wait_s=5, clock=Clock())
    verdict = judge(gangs, view, pod("m0", annotations=ours("g", "8")), ["a", "b"])
    assert verdict.fits == []
    assert set(verdict.failed) == {"a", "b"}
    why = verdict.failed["a"]
    assert isinstance(why, GangTooFewFit) and (why.fit, why.size) == (7, 8), verdict.failed
    assert render(why).startswith("gang ns/g: 7 of 8 fit (0/2 nodes fit")
    assert gangs.held() == {} and free_cards(view) == 7 and view.charges() == {}


def test_a_group_is_reserved_within_one_site_unless_it_may_span_sites() -> None:
    """Nodes labelled with sites (``xpupool.io/site``): the engine keeps a gang in one site
    (issue 42), so a group takes the one site that holds it whole, is refused when none does,
    and spans sites when its pods' request says ``span-sites``."""
    sited = [gpu_node("a", count=2, site="a"), gpu_node("b", count=2, site="b")]
    view = view_with(*sited, gpu_node("c", count=4, site="c"))
    gangs = Gangs(view, wait_s=5, clock=Clock())
    judge(gangs, view, pod("m0", annotations=ours("g", "3")), ["a", "b", "c"])
    assert {s.node for s in gangs.held()["ns/g"]} == {"c"}
    view = view_with(*sited)
    gangs = Gangs(view, wait_s=5, clock=Clock())
    refused = judge(gangs, view, pod("m0", annotations=ours("g", "3")), ["a", "b"])
    why = refused.failed["a"]
    assert refused.fits == [] and isinstance(why, GangTooFewFit)
    assert "no single site holds 3 replicas" in why.why.note
    assert gangs.held() == {} and free_cards(view) == 4
    spanning = ours("g", "3") | {ANNOTATION_REQUEST: "span-sites"}
    judge(gangs, view, pod("m0", annotations=spanning), ["a", "b"])
    assert {s.node for s in gangs.held()["ns/g"]} == {"a", "b"}


def test_a_group_is_reserved_within_one_link_domain_of_the_cluster() -> None:
    """Nodes in zones (``--link-domain-label``: the decoder sets ``Node.link_domain``, issue
    51): a group takes the one zone that holds it whole (zone-1's two cards cannot), and is
    refused, holding nothing, when no zone does though the cluster has room."""
    z1 = [replace(gpu_node(n, count=1), link_domain="zone-1") for n in ("a", "b")]
    z2 = [replace(gpu_node("c", count=3), link_domain="zone-2")]
    view = view_with(*z1, *z2)
    gangs = Gangs(view, wait_s=5, clock=Clock())
    judge(gangs, view, pod("m0", annotations=ours("g", "3")), ["a", "b", "c"])
    assert {s.node for s in gangs.held()["ns/g"]} == {"c"}
    view = view_with(*z1, replace(gpu_node("c", count=2), link_domain="zone-2"))
    gangs = Gangs(view, wait_s=5, clock=Clock())
    refused = judge(gangs, view, pod("m0", annotations=ours("g", "3")), ["a", "b", "c"])
    why = refused.failed["a"]
    assert refused.fits == [] and isinstance(why, GangTooFewFit)
    assert "no single link domain holds 3 replicas" in why.why.note
    assert gangs.held() == {} and free_cards(view) == 4


def test_a_pod_group_label_takes_its_size_from_the_lookup() -> None:
    view = view_with(gpu_node("a", count=2))
    gangs = Gangs(view, sizes=lambda ns, name: 3, wait_s=5, clock=Clock())
    verdict = judge(gangs, view, pod("m0", labels={POD_GROUP_LABEL: "pg"}), ["a"])
    why = verdict.failed["a"]
    assert verdict.fits == [] and isinstance(why, GangTooFewFit) and (why.fit, why.size) == (2, 3)
    no_reader = Gangs(view, wait_s=5)
    with pytest.raises(RequestError, match="PodGroup"):
        no_reader.size_of(GroupClaim("ns", "pg", None))


# ---------------------------------------------------------------------- bind
def bind_all(gangs: Gangs, pods: list[dict[str, Any]], node_of: dict[str, str]) -> dict[str, Any]:
    """Each pod's bind in its own thread, as kube-scheduler's binding cycles run: take, wait,
    then report bound. Returns uid -> None (bound) or why not."""
    out: dict[str, Any] = {}

    def one(p: dict[str, Any]) -> None:
        claim = group_claim(p)
        assert claim is not None
        uid = p["metadata"]["uid"]
        placed = gangs.take(claim, gangs.size_of(claim), demand_of(p), uid, node_of[uid])
        if not isinstance(placed, tuple):
            out[uid] = placed
            return
        why = gangs.wait(claim, uid)
        if why is None:
            gangs.bound(claim, uid, ok=True)
        out[uid] = why

    threads = [threading.Thread(target=one, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def reserve(gangs: Gangs, view: ClusterView, members: list[dict[str, Any]]) -> dict[str, str]:
    """The first member's filter reserves the group ns/g; member UID -> the node of a place,
    one place each, as kube-scheduler would choose among the nodes filter kept."""
    judge(gangs, view, members[0], ["a", "b"])
    nodes = [s.node for s in gangs.held()["ns/g"]]
    return {p["metadata"]["uid"]: n for p, n in zip(members, nodes, strict=True)}


def test_binds_wait_for_the_whole_group_then_all_go() -> None:
    view = view_with(gpu_node("a", count=4), gpu_node("b", count=4))
    gangs = Gangs(view, wait_s=10)
    members = [pod(f"m{i}", annotations=ours("g", "8")) for i in range(8)]
    node_of = reserve(gangs, view, members)
    result = bind_all(gangs, members, node_of)
    assert result == dict.fromkeys(node_of)
    charges = view.charges()
    assert set(charges) == set(node_of)  # the slots' reservations are the pods' now
    for uid, allocs in charges.items():
        assert all(a.node == node_of[uid] for a in allocs)
    assert gangs.held() == {} and free_cards(view) == 0
    claim = GroupClaim("ns", "g", 8)
    assert gangs.completed(claim)  # a further pod of the group goes alone


@pytest.mark.slow
def test_a_member_that_never_comes_times_out_and_releases_every_place() -> None:
    view = view_with(gpu_node("a", count=4), gpu_node("b", count=4))
    gangs = Gangs(view, wait_s=0.5)
    members = [pod(f"m{i}", annotations=ours("g", "8")) for i in range(8)]
    node_of = reserve(gangs, view, members)
    result = bind_all(gangs, members[:7], node_of)  # the 8th never comes
    assert len(result) == 7
    timeout = GangBindTimeout("ns/g", 7, 8, 0.5)
    assert all(why == timeout for why in result.values()), result
    assert view.charges() == {} and free_cards(view) == 8 and gangs.held() == {}
    late = bind_all(gangs, members[7:], node_of)  # too late: nothing held for it any more
    assert late[members[7]["metadata"]["uid"]] == GangReleased("ns/g")
    # the next attempt starts over and, with every member there, binds
    node_of = reserve(gangs, view, members)
    assert bind_all(gangs, members, node_of) == dict.fromkeys(node_of)


def test_a_bind_on_another_node_than_its_place_is_refused() -> None:
    view = view_with(gpu_node("a", count=2), gpu_node("b", count=2))
    gangs = Gangs(view, wait_s=5)
    members = [pod(f"m{i}", annotations=ours("g", "2")) for i in range(2)]
    judge(gangs, view, members[0], ["a", "b"])
    (held_on,) = {s.node for s in gangs.held()["ns/g"]}
    elsewhere = "b" if held_on == "a" else "a"
    claim = GroupClaim("ns", "g", 2)
    why = gangs.take(claim, 2, demand_of(members[0]), "uid-m0", elsewhere)
    assert why == GangPlaceElsewhere("ns/g", held_on, elsewhere)
    assert render(why) == f"gang ns/g: this pod's place is on {held_on}, not {elsewhere}"
    why = gangs.take(claim, 2, demand_of(members[1]), "uid-m1", elsewhere)  # never filtered
    assert why == GangNoFreePlace("ns/g", elsewhere)
    assert view.charges() == {}  # nothing taken


def test_places_nobody_comes_to_bind_are_released_by_a_sweep() -> None:
    clock = Clock()
    view = view_with(gpu_node("a", count=4))
    gangs = Gangs(view, wait_s=5, clock=clock)
    judge(gangs, view, pod("m0", annotations=ours("g", "3")), ["a"])
    assert free_cards(view) == 1
    clock.now += 4
    gangs.sweep()
    assert free_cards(view) == 1
    clock.now += 2
    gangs.sweep()
    assert free_cards(view) == 4 and view.charges() == {} and gangs.held() == {}


def test_wait_must_be_positive_and_bounded() -> None:
    view = view_with(gpu_node("a", count=1))
    for bad in (0, -1, 601):
        with pytest.raises(RequestError, match="gang wait"):
            Gangs(view, wait_s=bad)


# ---------------------------------------------------------------------- the extender's hooks
class NoApi:
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        raise AssertionError("filter makes no API call")

    def annotate_pod(self, *args: Any) -> None:
        raise AssertionError("filter makes no API call")

    def bind_pod(self, *args: Any) -> None:
        raise AssertionError("filter makes no API call")


def test_the_extender_filters_members_to_their_places_and_refuses_bad_claims() -> None:
    view = view_with(gpu_node("a", count=2), gpu_node("b", count=2))
    gangs = Gangs(view, wait_s=5)
    ext = Extender(view, NoApi(), lambda node, demand, allocs: {}, gangs)

    def filter_(p: dict[str, Any]) -> ExtenderFilterResult:
        return ext.filter(ExtenderArgs(Pod=p, NodeNames=["a", "b", "c"]))

    bad = filter_(pod("m0", annotations=ours("g", "lots")))
    assert GANG_SIZE_ANNOTATION in bad.error and "whole number" in bad.error
    got = filter_(pod("m0", annotations=ours("g", "2")))
    (held_on,) = {s.node for s in gangs.held()["ns/g"]}  # binpacked: both on one node
    assert got.node_names == [held_on] and got.error == ""
    assert got.failed_nodes is None  # as for any pod that fits: the node alone
    alone = filter_(pod("plain", gpus="1"))  # a plain pod sees the two cards left
    assert alone.node_names == ["b" if held_on == "a" else "a"]
    too_big = filter_(pod("n0", annotations=ours("h", "3")))  # plain holds one of them
    assert too_big.node_names == [] and too_big.failed_nodes is not None
    assert all("gang ns/h: 1 of 3 fit" in why for why in too_big.failed_nodes.values())
