"""Two electors on one real Lease: exactly one leads; when the leader dies without a word the other
takes over only after leaseDurationSeconds, bumping leaseTransitions; when the leader stops
cleanly it releases (empty holder, 1 s lease, as client-go's tryRelease) and the other takes over
at once. The Lease is read back from the apiserver as client-go would read it."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from cluster import K8sCluster

from xpupool.k8s.informers.kubeconfig import load_config
from xpupool.k8s.informers.leader import LeaderElector

pytestmark = pytest.mark.k8s

LEASE_S = 3
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def elector(cluster: K8sCluster, lease: str, identity: str) -> LeaderElector:
    return LeaderElector(
        load_config(cluster.kubeconfig),
        name=lease,
        namespace="default",
        identity=identity,
        lease_duration_s=LEASE_S,
        renew_deadline_s=2.0,
        retry_period_s=0.25,
    )


def read_lease(cluster: K8sCluster, name: str) -> dict[str, Any]:
    r = cluster.api.get(f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
    r.raise_for_status()
    spec: dict[str, Any] = r.json()["spec"]
    return spec


def one_leader(electors: list[LeaderElector], timeout_s: float = 10.0) -> LeaderElector:
    """The one elector that leads, once one does; never two at any sample."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leading = [e for e in electors if e.is_leader]
        assert len(leading) <= 1, [e.identity for e in leading]
        if leading:
            return leading[0]
        time.sleep(0.02)
    raise AssertionError("nobody leads")


def test_one_leader_and_takeover_after_the_lease_runs_out(cluster: K8sCluster) -> None:
    a, b = elector(cluster, "crash", "replica-a"), elector(cluster, "crash", "replica-b")
    try:
        a.start()
        b.start()
        leader = one_leader([a, b])
        other = b if leader is a else a
        for _ in range(40):  # 2 s of renewals: still exactly one, always the same
            assert one_leader([a, b]) is leader
            time.sleep(0.05)
        spec = read_lease(cluster, "crash")
        assert spec["holderIdentity"] == leader.identity
        assert spec["leaseDurationSeconds"] == LEASE_S
        assert MICRO_TIME.fullmatch(spec["renewTime"]) and MICRO_TIME.fullmatch(spec["acquireTime"])
        transitions = spec.get("leaseTransitions", 0)

        died = time.monotonic()
        leader.stop(release=False)  # a crash: the Lease keeps its holder
        assert other.wait_leader(LEASE_S + 5)
        waited = time.monotonic() - died
        assert waited >= LEASE_S - 1.0  # it respected the lease (within one renew interval)
        spec = read_lease(cluster, "crash")
        assert spec["holderIdentity"] == other.identity
        assert spec["leaseTransitions"] == transitions + 1
    finally:
        a.stop()
        b.stop()


def test_release_on_stop_hands_over_at_once(cluster: K8sCluster) -> None:
    a, b = elector(cluster, "clean", "replica-a"), elector(cluster, "clean", "replica-b")
    try:
        a.start()
        assert a.wait_leader(10)
        b.start()
        time.sleep(0.5)
        assert one_leader([a, b]) is a
        stopped = time.monotonic()
        a.stop()  # releases
        spec = read_lease(cluster, "clean")
        assert spec["holderIdentity"] in ("", "replica-b")
        assert b.wait_leader(LEASE_S)
        assert time.monotonic() - stopped < LEASE_S - 1.0  # no wait for the lease to run out
        assert read_lease(cluster, "clean")["holderIdentity"] == "replica-b"
    finally:
        a.stop()
        b.stop()
