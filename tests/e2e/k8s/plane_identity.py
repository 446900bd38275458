"""The control plane's identity on the test control plane, as the Helm chart's server part sets it
up: the chart rendered by the real ``helm`` (release ``xp`` in ``xpupool-system``), its
ServiceAccount, RBAC and admission policies applied for real, and a kubeconfig holding that
ServiceAccount's token, so a plane run as a local process in a test acts with the chart's rights
and under its policies, not as the cluster's admin.

    kubeconfig = plane_identity(kc, tmp_path, tenant_namespaces=("xpupool-team-a",))
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from cluster import ROOT, K8sCluster, require_binaries, write_kubeconfig

CHART = ROOT / "deploy" / "helm" / "xpupool"
RELEASE, NAMESPACE = "xp", "xpupool-system"
SERVER = f"{RELEASE}-xpupool-server"  # the ServiceAccount the chart's server pod runs as
USER = f"system:serviceaccount:{NAMESPACE}:{SERVER}"
KUBE_VERSION = "1.36.3"  # the control plane tools/k8s/build.sh builds
IDENTITY_KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "PriorityClass",  # the one its pods name: the plane may not create it
}


def render_server(workdir: Path, sets: Sequence[str]) -> list[dict[str, Any]]:
    """The chart's objects with the server part on (``sets`` are more ``--set`` values); helm's
    homes under ``workdir``, so nothing lands in $HOME."""
    helm = require_binaries(("helm",))["helm"]
    env = dict(os.environ)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(workdir / "helm" / var.lower())
    args = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--kube-version", KUBE_VERSION, "--set", "server.enabled=true"]
    args += ["--set", "server.secretKey.secretName=xp-secret-key"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, f"helm template failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def apply(kc: K8sCluster, objs: list[dict[str, Any]]) -> None:
    """``kubectl apply`` for real (RBAC and admission policies take effect)."""
    kubectl = require_binaries(("kubectl",))["kubectl"]
    out = subprocess.run(
        [str(kubectl), f"--kubeconfig={kc.kubeconfig}", "apply", "-f", "-"],
        input=yaml.safe_dump_all(objs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def plane_identity(
    kc: K8sCluster,
    workdir: Path,
    *,
    tenant_namespaces: Sequence[str] = (),
    sets: Sequence[str] = (),
) -> Path:
    """Apply the chart's identity objects for the plane (its ServiceAccount, RBAC with a
    RoleBinding in each of ``tenant_namespaces``, created when missing, and both admission
    policies) and return a kubeconfig with that ServiceAccount's token. Returns once the plane's
    token is allowed to list Nodes (RBAC's cache follows the apply within moments)."""
    for ns in (NAMESPACE, *tenant_namespaces):
        if kc.api.get(f"/api/v1/namespaces/{ns}").status_code == 404:
            kc.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    tenants = "{" + ",".join(tenant_namespaces) + "}"
    more = [f"server.tenantNamespaces={tenants}"] if tenant_namespaces else []
    objs = render_server(workdir, [*more, *sets])
    apply(kc, [o for o in objs if o["kind"] in IDENTITY_KINDS and is_servers(o)])
    path = workdir / "plane.kubeconfig"
    write_kubeconfig(path, kc.api_url, token=kc.token(NAMESPACE, SERVER))
    deadline = time.monotonic() + 30
    with_token = {"Authorization": f"Bearer {kc.token(NAMESPACE, SERVER)}"}
    while kc.api.get("/api/v1/nodes", headers=with_token).status_code != 200:
        assert time.monotonic() < deadline, "the plane's token never got to list Nodes"
        time.sleep(0.2)
    return path


def is_servers(obj: dict[str, Any]) -> bool:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "server"
