"""The node agent's admission policy (deploy/policies/node-agent-vap.yaml) on a real
kube-apiserver v1.36: with a ServiceAccount token bound to Node A (TokenRequest, boundObjectRef
kind Node), the agent's identity may patch Node A's xpupool annotations and nothing else: Node B,
a label, someone else's annotation, the spec, a delete and a token bound to no Node are refused
with 403 and the policy's message. RBAC alone would allow each of them (shown before the policy
is applied), so every refusal here is the policy's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_identity import AGENT_SA, FAKE, NAMESPACE, agent_rbac, apply_policy, make_node
from cluster import K8sCluster, make_api_client, require_binaries

from xpupool.agent.monitor import Monitor
from xpupool.k8s.codec.node_annotations import DEVICES_KEY, decode_devices
from xpupool.k8s.node_agent.agent import NodeAgent, NodeAgentError
from xpupool.probes import FakeProbe

pytestmark = pytest.mark.k8s

MERGE = {"Content-Type": "application/merge-patch+json"}


def patch(client: httpx.Client, node: str, body: dict[str, Any]) -> httpx.Response:
    return client.patch(f"/api/v1/nodes/{node}", json=body, headers=MERGE)


def annotate(key: str, value: str = "x") -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


@pytest.fixture
def kc(tmp_path: Path) -> Iterator[K8sCluster]:
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(tmp_path / "k8s", scheduler=False) as cluster:
        agent_rbac(cluster)
        make_node(cluster, "node-a")
        make_node(cluster, "node-b")
        yield cluster


def wait_refused(client: httpx.Client, node: str, body: dict[str, Any]) -> httpx.Response:
    """The policy's informers take a moment after creation: retry until it refuses."""
    deadline = time.monotonic() + 30
    while True:
        r = patch(client, node, body)
        if r.status_code == 403 or time.monotonic() > deadline:
            return r
        time.sleep(0.3)


def refused(r: httpx.Response, words: str) -> None:
    assert r.status_code == 403, f"HTTP {r.status_code}: {r.text}"
    message = r.json()["message"]
    assert "ValidatingAdmissionPolicy 'xpupool-node-agent'" in message, message
    assert words in message, message


def test_a_node_bound_agent_may_patch_only_its_own_nodes_xpupool_annotations(
    kc: K8sCluster,
) -> None:
    token_a = kc.token(NAMESPACE, AGENT_SA, node="node-a")
    unbound = kc.token(NAMESPACE, AGENT_SA)
    with (
        make_api_client(kc.api_url, token_a) as agent,
        make_api_client(kc.api_url, unbound) as loose,
    ):
        # RBAC alone lets the agent's identity write any Node, any way: what the policy is for.
        r = patch(agent, "node-b", annotate("xpupool.io/devices", "before"))
        assert r.status_code == 200, r.text
        assert patch(agent, "node-a", {"metadata": {"labels": {"x": "1"}}}).status_code == 200

        apply_policy(kc)
        other_node = "the xpupool node agent of Node 'node-a' may not modify Node 'node-b'"
        # (until the policy is live these write the value node-b already has)
        refused(wait_refused(agent, "node-b", annotate("xpupool.io/devices", "before")), other_node)
        refused(patch(agent, "node-b", annotate("xpupool.io/devices", "after")), other_node)
        policy = kc.api.get(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/xpupool-node-agent"
        ).json()
        assert not policy.get("status", {}).get("typeChecking", {}).get("expressionWarnings")

        ok = patch(agent, "node-a", annotate("xpupool.io/heartbeat", "2026-11-27T05:00:00Z"))
        assert ok.status_code == 200, ok.text
        ok = patch(agent, "node-a", annotate("hami.io/node-nvidia-register", "[]"))
        assert ok.status_code == 200, ok.text

        words = "may change only xpupool's annotations of its Node, not its labels, spec"
        refused(patch(agent, "node-a", {"metadata": {"labels": {"x": "2"}}}), words)
        refused(patch(agent, "node-a", {"spec": {"unschedulable": True}}), words)
        refused(
            patch(agent, "node-a", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            words,
        )
        refused(
            patch(agent, "node-a", annotate("other.io/owner")), "only annotations under xpupool.io/"
        )
        refused(patch(loose, "node-a", annotate("xpupool.io/devices")), "bound to no Node")

        after = kc.api.get("/api/v1/nodes/node-a").json()
        assert after["metadata"]["labels"]["x"] == "1"  # nothing refused was written
        assert "other.io/owner" not in after["metadata"]["annotations"]
        assert not after["spec"].get("unschedulable")
        b = kc.api.get("/api/v1/nodes/node-b").json()
        assert b["metadata"]["annotations"]["xpupool.io/devices"] == "before"


def test_the_agent_with_a_node_bound_token_writes_its_node_and_is_refused_elsewhere(
    kc: K8sCluster, tmp_path: Path
) -> None:
    from cluster import write_kubeconfig
    from lightkube import Client, KubeConfig

    apply_policy(kc)
    config = tmp_path / "agent.kubeconfig"
    write_kubeconfig(config, kc.api_url, kc.token(NAMESPACE, AGENT_SA, node="node-a"))
    with make_api_client(kc.api_url, kc.token(NAMESPACE, AGENT_SA, node="node-a")) as probe:
        wait_refused(probe, "node-b", annotate("xpupool.io/policy-probe"))
    client = Client(KubeConfig.from_file(config))
    try:
        mine = NodeAgent(client, "node-a", Monitor([FakeProbe(FAKE)]))
        mine.sync()
        theirs = NodeAgent(client, "node-b", Monitor([FakeProbe(FAKE)]))
        with pytest.raises(NodeAgentError) as err:
            theirs.sync()
    finally:
        client.close()
    assert "HTTP 403" in str(err.value)
    assert "may not modify Node 'node-b'" in str(err.value)
    node_a = kc.api.get("/api/v1/nodes/node-a").json()
    assert len(decode_devices(node_a["metadata"]["annotations"][DEVICES_KEY])) == 2
    assert DEVICES_KEY not in kc.api.get("/api/v1/nodes/node-b").json()["metadata"].get(
        "annotations", {}
    )
