"""Fixtures the Kubernetes e2e modules share: a real control plane per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import K8sCluster, require_binaries


@pytest.fixture(scope="module")
def cluster() -> Iterator[K8sCluster]:
    """etcd and kube-apiserver only (no scheduler), for one module; a missing binary fails."""
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(scheduler=False) as kc:
        yield kc
