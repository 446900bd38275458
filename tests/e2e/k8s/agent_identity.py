"""The node agent's identity on the test control plane, as the Helm chart sets it up: its
ServiceAccount, the RBAC it gets (get and patch on nodes) and the shipped admission policy
(deploy/policies/node-agent-vap.yaml, applied as is). Shared by the policy and end-to-end tests.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from cluster import K8sCluster

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "deploy" / "policies" / "node-agent-vap.yaml"
FAKE = ROOT / "tests" / "fixtures" / "agent" / "fake-a100x2.yaml"
NAMESPACE, AGENT_SA = "xpupool", "xpupool-node-agent"  # the user the policy's matchCondition names


def agent_rbac(kc: K8sCluster) -> None:
    """The agent's ServiceAccount and the RBAC the chart gives it: get and patch on nodes."""
    kc.service_account(NAMESPACE, AGENT_SA)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kc.create(
        f"{rbac}/clusterroles",
        {
            "metadata": {"name": AGENT_SA},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        },
    )
    kc.create(
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": AGENT_SA},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": AGENT_SA,
            },
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": NAMESPACE}],
        },
    )


def apply_policy(kc: K8sCluster) -> None:
    """The shipped manifest, as is."""
    base = "/apis/admissionregistration.k8s.io/v1"
    paths = {
        "ValidatingAdmissionPolicy": f"{base}/validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": f"{base}/validatingadmissionpolicybindings",
    }
    for doc in yaml.safe_load_all(POLICY.read_text()):
        kc.create(paths[doc["kind"]], doc)


def make_node(kc: K8sCluster, name: str) -> None:
    kc.create(
        "/api/v1/nodes",
        {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}},
    )
