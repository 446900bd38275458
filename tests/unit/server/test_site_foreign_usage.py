"""Pods on a Kubernetes site's nodes that the plane did not create are metered (issue 52), so a
site's card-hours add up: recorded pod objects go through the site's watch consumer
(``k8s/site/foreign.py``, over the HAMi annotation decoder) into a real plane, without a
cluster. A pod in a tenant's namespace is that tenant's; any other is tenant ``foreign``; the
namespace is the queue; a pod that moves to other cards starts a new record."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server
from test_site_foreign_use import bound_pod, kube, seen  # noqa: F401  (kube: the fixture)

from xpupool.k8s.informers.watch import EventType
from xpupool.k8s.site.site import KubernetesSite


def _usage(srv: Server) -> dict[tuple[str, str], float]:
    params = {"by": "tenant,queue", "step": "month", "from": "0"}
    rows = srv.client.get("/v1/usage", params=params, headers=srv.admin).json()["rows"]
    return {(r["tenant"], r["queue"]): r["device_seconds"] for r in rows if r["tenant"] != "pool"}


def test_pods_the_plane_did_not_create_are_metered_by_namespace(
    kube: tuple[Server, KubernetesSite],  # noqa: F811
) -> None:
    srv, site = kube
    other: dict[str, Any] = bound_pod("other", "k1", ["GPU-k1-0"])  # namespace 'other'
    theirs = bound_pod("train", "k1", ["GPU-k1-1"], namespace="xpupool-b")  # tenant b's
    seen(site, other)
    seen(site, theirs)
    srv.clock.advance(3600)
    srv.plane.meter.flush(srv.plane)
    assert _usage(srv) == {
        ("foreign", "other"): pytest.approx(3600),
        ("b", "xpupool-b"): pytest.approx(3600),
    }
    seen(site, {**other, "status": {"phase": "Running", "podIP": "10.0.0.9"}}, EventType.MODIFIED)
    seen(site, theirs, EventType.DELETED)  # b's pod ends: its record closes
    srv.clock.advance(1800)
    seen(site, {**other, "status": {"phase": "Succeeded"}}, EventType.MODIFIED)
    srv.clock.advance(1800)
    srv.plane.meter.flush(srv.plane)
    assert _usage(srv) == {
        ("foreign", "other"): pytest.approx(5400),  # a status change kept its one record
        ("b", "xpupool-b"): pytest.approx(3600),
    }
