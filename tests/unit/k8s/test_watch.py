"""The informer's pure parts: reading an object's identity from hostile metadata, and the backoff."""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.k8s.informers.watch import BadObjectError, backoff_s, identity


def test_identity_of_cluster_and_namespaced_objects() -> None:
    node = {"metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7"}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u2", "resourceVersion": "9"}}
    assert identity(node) == ("n1", "u1", "7")
    assert identity(pod) == ("ns/p", "u2", "9")


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({}, "metadata"),
        ({"metadata": []}, "metadata"),
        ({"metadata": {"uid": "u", "resourceVersion": "1"}}, "metadata.name"),
        ({"metadata": {"name": "x" * 254, "uid": "u", "resourceVersion": "1"}}, "metadata.name"),
        ({"metadata": {"name": "n", "uid": 5, "resourceVersion": "1"}}, "metadata.uid"),
        ({"metadata": {"name": "n", "uid": "u"}}, "metadata.resourceVersion"),
        (
            {"metadata": {"name": "n", "namespace": "", "uid": "u", "resourceVersion": "1"}},
            "metadata.namespace",
        ),
    ],
)
def test_identity_names_the_bad_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(BadObjectError) as err:
        identity(obj)
    assert err.value.field == field


def test_backoff_doubles_to_its_cap_with_jitter() -> None:
    for failures, full in [(1, 0.2), (2, 0.4), (5, 3.2), (20, 30.0), (10**6, 30.0)]:
        for _ in range(20):
            assert full / 2 <= backoff_s(failures) <= full
