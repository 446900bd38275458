"""Kubectl users' gated pods of a PodGroup held until the group is whole (issue 49, part 3):
one owner's pods only, the size from the PodGroup's minMember or xpupool's annotation, a member
deleted no longer counted."""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.k8s.informers.pod_groups import GANG_ANNOTATION, GANG_SIZE_ANNOTATION, POD_GROUP_LABEL
from xpupool.k8s.site.gated_gangs import FormingGangs, controller_uid
from xpupool.model.errors import RequestError


def member(name: str, owner: str | None = "job-uid", **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "xpupool-ml",
        "uid": f"uid-{name}",
        "labels": {} if annotations else {POD_GROUP_LABEL: "pair"},
        "annotations": annotations,
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "rs", "uid": "other", "controller": False},
            {"kind": "Job", "name": "trainer", "uid": owner, "controller": True},
        ]
    return {"metadata": meta}


def sizes(seen: list[tuple[str, str]], size: int = 2) -> FormingGangs:
    def size_of(namespace: str, name: str) -> int:
        seen.append((namespace, name))
        return size

    return FormingGangs(size_of)


def test_a_group_is_given_once_it_has_its_minmember_ordered_by_name() -> None:
    asked: list[tuple[str, str]] = []
    gangs = sizes(asked)
    b, a = member("b"), member("a")
    claim = gangs.claim(b)
    assert claim is not None
    assert gangs.add(claim, b) is None
    assert gangs.holds("uid-b")
    assert gangs.add(claim, a) == [a, b]
    assert not gangs.holds("uid-a") and not gangs.holds("uid-b")  # forgotten once given
    assert asked == [("xpupool-ml", "pair")]


def test_a_deleted_member_no_longer_counts() -> None:
    gangs = sizes([])
    first = member("a")
    claim = gangs.claim(first)
    assert claim is not None
    gangs.add(claim, first)
    gangs.drop("uid-a")
    assert gangs.add(claim, member("b")) is None  # alone again


def test_the_annotations_size_needs_no_podgroup() -> None:
    gangs = sizes([], size=99)
    solo = member("a", **{GANG_ANNOTATION: "g", GANG_SIZE_ANNOTATION: "1"})
    claim = gangs.claim(solo)
    assert claim is not None and claim.size == 1
    assert gangs.add(claim, solo) == [solo]


def test_a_member_of_no_owner_or_of_another_owner_is_refused() -> None:
    gangs = sizes([], size=3)
    claim = gangs.claim(member("a"))
    assert claim is not None
    with pytest.raises(RequestError, match="it has no controller"):
        gangs.add(claim, member("a", owner=None))
    gangs.add(claim, member("a"))
    with pytest.raises(RequestError, match="a gang is one owner's pods") as refused:
        gangs.add(claim, member("b", owner="another-job"))
    assert refused.value.field == "metadata.ownerReferences"
    assert not gangs.holds("uid-b")


def test_a_pod_of_no_group_is_none_and_the_controller_is_the_controlling_reference() -> None:
    plain = member("a")
    plain["metadata"]["labels"] = {}
    assert FormingGangs.claim(plain) is None
    assert controller_uid(member("a")) == "job-uid"
    assert controller_uid({"metadata": {"ownerReferences": "nonsense"}}) is None
