"""The chart's control-plane part (``server.enabled``): ``helm template`` renders it, the real
kube-apiserver accepts every object by server-side dry run (no image can be pulled here), and
its RBAC, applied for real, gives the plane's service account what docs/kubernetes.md says it
needs and nothing beside: read Nodes and Pods everywhere, work in the tenant namespaces only,
create namespaces and bind the tenant role there only when asked. The admission policies are
tested on a real apiserver in test_plane_policies_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import K8sCluster, require_binaries
from plane_identity import SERVER, USER, apply
from test_helm_chart import (
    NAMESPACE,
    RELEASE,
    container,
    helm_env,
    helm_template,
    kubectl_dry_run,
    kubectl_name,
    only,
    parse_command,
    render,
    tools,
)

from xpupool.cli_up import up

pytestmark = pytest.mark.k8s
__all__ = ["helm_env", "tools"]  # fixtures, imported for pytest

assert SERVER.startswith(f"{RELEASE}-") and f":{NAMESPACE}:" in USER  # the same release
TENANT_ROLE = f"{SERVER}-tenant"
TENANTS = ("team-a", "team-b")
# What every server rendering here sets: the Secret of the sealing key and two tenant namespaces.
ON = (
    "server.enabled=true",
    "server.secretKey.secretName=xp-secret-key",
    "server.tenantNamespaces={team-a,team-b}",
)
# PostgreSQL from a Secret's URL, and a standby beside the active plane, both given the admin
# token of one Secret (docs/postgresql.md).
STANDBY = (
    "server.database.urlSecretName=xp-db",
    "server.replicas=2",
    "server.adminToken.secretName=xp-admin-token",
)
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def server_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "server"
    ]


# -- rendering --------------------------------------------------------------------------------


def test_the_server_part_is_off_by_default(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    assert server_objects(render(tools, helm_env)) == []


def test_the_server_part_renders_a_statefulset_with_its_volume_service_and_sites_file(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    objs = render(tools, helm_env, *ON, "server.namespaces.ml-team=research")
    sts = only(objs, "StatefulSet", SERVER)
    assert sts["spec"]["replicas"] == 1
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVER
    only(objs, "ServiceAccount", SERVER)
    server = container(pod, "server")
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert mounts["data"] == "/var/lib/xpupool"
    assert "--data=/var/lib/xpupool" in server["args"]
    assert f"--sites={mounts['sites']}/sites.yaml" in server["args"]
    assert f"--secret-key-file={mounts['secret-key']}/key" in server["args"]
    # The key comes from the Secret, copied mode 0600 into memory by the init container.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secret-key-secret"]["secret"]["secretName"] == "xp-secret-key"
    assert volumes["secret-key"]["emptyDir"]["medium"] == "Memory"
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["install", "-m", "0600"]

    svc = only(objs, "Service", SERVER)
    assert svc["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["ports"][0]["port"] == 8080

    sites = yaml.safe_load(only(objs, "ConfigMap", SERVER)["data"]["sites.yaml"])
    assert sites == {
        "sites": [
            {
                "name": "cluster",
                "kind": "kubernetes",
                "in_cluster": True,
                "scheduler_name": "xpupool",  # the chart's scheduler profile
                "namespace_prefix": "xpupool-",
                "namespaces": {"ml-team": "research"},
                "create_namespaces": False,
                "finished_pods_retention_s": 300,
                # the agents' card power, each agent found in its Service's EndpointSlices
                "node_metrics": {
                    "service": f"{NAMESPACE}/{RELEASE}-xpupool-node-agent-metrics",
                    "port": "metrics",
                },
            }
        ]
    }
    # The site's own loader, where this tree has it (the Kubernetes site, issue 49), reads it.
    try:
        from xpupool.k8s.site.sites_file import parse_sites  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        (site,) = parse_sites(sites)
        assert site.in_cluster and site.namespace("ml-team") == "research"
    # A RoleBinding in each tenant namespace, the mapped one included.
    bindings = [o for o in server_objects(objs) if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["research", *TENANTS]
    assert {b["roleRef"]["name"] for b in bindings} == {TENANT_ROLE}


def test_the_server_args_are_the_real_command(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    """``xpupool up``'s own command line parses the rendered arguments. ``--sites`` is the
    Kubernetes site's option; where this tree's ``up`` lacks it, the rest still parses."""
    pod = only(render(tools, helm_env, *ON), "StatefulSet")["spec"]["template"]["spec"]
    args = container(pod, "server")["args"]
    if not any(p.name == "sites" for p in up.params):
        args = [a for a in args if not a.startswith("--sites=")]
    ctx = parse_command(args, tmp_path)
    assert ctx.info_name == "up"
    assert ctx.params["port"] == 8080
    assert ctx.params["host"] == "0.0.0.0"
    assert ctx.params["agent"] is False


def test_on_postgresql_two_planes_run_as_standbys_with_the_url_from_a_secret(
    tools: dict[str, Path],
    helm_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 50: the store's URL comes from a Secret in ``XPUPOOL_DB`` (never the command line);
    with two replicas both run ``--standby`` (the first to claim serves), start in parallel (a
    standby is never ready), and are kept alive by their port, since a standby's ``/healthz``
    is 503 while it waits; readiness stays ``/healthz``, so the Service reaches the active one
    only."""
    sts = only(render(tools, helm_env, *ON, *STANDBY), "StatefulSet", SERVER)
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    server = container(sts["spec"]["template"]["spec"], "server")
    assert "--standby" in server["args"]
    assert not any(a.startswith("--db") for a in server["args"])
    (env,) = server["env"]
    assert env == {
        "name": "XPUPOOL_DB",
        "valueFrom": {"secretKeyRef": {"name": "xp-db", "key": "url"}},
    }
    # one admin token for both planes, from the Secret, as a file (never in the environment)
    assert "--admin-token-file=/var/run/xpupool-admin-token/token" in server["args"]
    (mount,) = [m for m in server["volumeMounts"] if m["name"] == "admin-token"]
    assert mount == {
        "name": "admin-token",
        "mountPath": "/var/run/xpupool-admin-token",
        "readOnly": True,
    }
    (volume,) = [
        v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "admin-token"
    ]
    assert volume["secret"]["secretName"] == "xp-admin-token"
    assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert server["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert server["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert "httpGet" not in server["livenessProbe"]
    # the real command line takes the URL from that variable
    monkeypatch.setenv("XPUPOOL_DB", "postgresql://xp:pw@db:5432/xp")
    args = [a for a in server["args"] if not a.startswith("--sites=")]
    token = tmp_path / "var" / "run" / "xpupool-admin-token" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("t" * 40)
    args = [a.replace("=/var/run/", f"={tmp_path}/var/run/") for a in args]
    ctx = parse_command(args, tmp_path)
    assert ctx.params["standby"] is True
    assert ctx.params["db"] == "postgresql://xp:pw@db:5432/xp"
    assert ctx.params["admin_token_file"] == str(token)

    # one plane on PostgreSQL: the URL, no standby, /healthz keeps it alive as on SQLite
    one = only(render(tools, helm_env, *ON, STANDBY[0]), "StatefulSet", SERVER)
    assert one["spec"]["replicas"] == 1
    server = container(one["spec"]["template"]["spec"], "server")
    assert "--standby" not in server["args"] and server["env"][0]["name"] == "XPUPOOL_DB"
    assert not any(a.startswith("--admin-token-file") for a in server["args"])  # made by it
    assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (("server.enabled=true",), "server.secretKey.secretName"),
        ((*ON, "server.tenantNamespaces[0]=Team_A"), "/server/tenantNamespaces/0"),
        ((*ON, "server.admissionGate.apiVersion=v1"), "/server/admissionGate/apiVersion"),
        ((*ON, "server.siteName=Bad.Site"), "/server/siteName"),
        ((*ON, "server.finishedPodsRetentionS=-1"), "/server/finishedPodsRetentionS"),
        ((*ON, "server.storage.size=lots"), "/server/storage/size"),
        ((*ON, "server.replicas=2"), "server.database.urlSecretName"),  # SQLite: one plane
        ((*ON, *STANDBY[:1], "server.replicas=3"), "/server/replicas"),
        ((*ON, *STANDBY[:2]), "server.adminToken.secretName"),  # each plane its own token
        ((*ON, "server.adminToken.secretName=Bad_Name"), "/server/adminToken/secretName"),
        ((*ON, "server.database.urlSecretName=Bad_Name"), "/server/database/urlSecretName"),
    ],
)
def test_bad_server_values_are_refused_naming_the_field(
    tools: dict[str, Path], helm_env: dict[str, str], sets: tuple[str, ...], field: str
) -> None:
    out = helm_template(tools, helm_env, *sets)
    assert out.returncode != 0
    assert field in out.stderr, out.stderr


def test_the_namespace_rights_come_only_with_create_namespaces(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    name = f"{SERVER}-namespaces"
    assert not [o for o in render(tools, helm_env, *ON) if o["metadata"]["name"] == name]
    creating = render(tools, helm_env, *ON, "server.createNamespaces=true")
    role = only(creating, "ClusterRole", name)
    (bind,) = [r for r in role["rules"] if "bind" in r["verbs"]]
    assert bind["resourceNames"] == [TENANT_ROLE]
    # The gate then reaches namespaces the plane will create: every one but the system's and
    # the release's own (with a fixed list, only the listed ones).
    (expr,) = only(creating, "MutatingAdmissionPolicyBinding")["spec"]["matchResources"][
        "namespaceSelector"
    ]["matchExpressions"]
    assert expr["operator"] == "NotIn" and NAMESPACE in expr["values"]
    (expr,) = only(render(tools, helm_env, *ON), "MutatingAdmissionPolicyBinding")["spec"][
        "matchResources"
    ]["namespaceSelector"]["matchExpressions"]
    assert (expr["operator"], expr["values"]) == ("In", list(TENANTS))


# -- the real control plane -------------------------------------------------------------------


@pytest.fixture(scope="module")
def kc(tools: dict[str, Path]) -> Iterator[K8sCluster]:
    """A control plane with the release namespace and the tenant namespaces in it."""
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(scheduler=False) as cluster:
        for ns in (NAMESPACE, *TENANTS, "elsewhere"):
            cluster.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        yield cluster


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ON,
        (*ON, "server.createNamespaces=true", "server.service.type=NodePort"),
        (*ON, *STANDBY),
    ],
    ids=["server-off", "server-on", "server-creates-namespaces", "server-standby"],
)
def test_apiserver_accepts_every_rendered_object(
    tools: dict[str, Path],
    helm_env: dict[str, str],
    kc: K8sCluster,
    sets: tuple[str, ...],
) -> None:
    objs = render(tools, helm_env, *sets)
    assert bool(server_objects(objs)) == bool(sets)
    out = kubectl_dry_run(tools, kc, objs)
    assert out.returncode == 0, f"the apiserver refused the chart:\n{out.stderr}"
    accepted = set(out.stdout.split())
    for obj in objs:
        assert kubectl_name(obj) in accepted, (kubectl_name(obj), sorted(accepted))


def can(kc: K8sCluster, verb: str, resource: str, namespace: str, name: str = "") -> bool:
    """A SubjectAccessReview for the plane's service account (with its groups)."""
    resource, _, subresource = resource.partition("/")
    resource, _, group = resource.partition(".")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": USER,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NAMESPACE}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "name": name,
            },
        },
    }
    out = kc.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(out["status"].get("allowed"))


# (verb, resource[.group][/subresource], namespace or "" for all)
PLANE_NEEDS = [
    ("list", "nodes", ""),
    ("watch", "nodes", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
    ("create", "pods", "team-a"),
    ("delete", "pods", "team-b"),
    ("get", "pods/log", "team-a"),
    ("patch", "pods", "team-a"),  # the gate's removal, narrowed by the ValidatingAdmissionPolicy
    ("create", "secrets", "team-a"),
    ("delete", "secrets", "team-a"),
    ("create", "services", "team-b"),
    ("create", "deployments.apps", "team-a"),
    ("list", "deployments.apps", "team-a"),
    ("patch", "deployments.apps", "team-a"),  # a service's Deployment, applied server-side
    ("patch", "services", "team-b"),
    ("watch", "endpointslices.discovery.k8s.io", ""),  # a service's ready endpoints
    ("list", "deployments.apps", ""),  # a restarted plane's sweep, by label
    ("create", "events", "team-a"),
]
PLANE_MUST_NOT = [
    ("create", "pods", "elsewhere"),  # not a tenant namespace
    ("create", "pods", ""),
    ("get", "secrets", "elsewhere"),
    ("list", "secrets", ""),
    ("patch", "pods/status", "team-a"),
    ("create", "pods/binding", "team-a"),  # the extender binds, never the plane
    ("delete", "nodes", ""),
    ("patch", "nodes", ""),
    ("create", "namespaces", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", "team-a"),
]


def test_rbac_gives_the_plane_what_it_needs_and_nothing_beside(
    tools: dict[str, Path], helm_env: dict[str, str], kc: K8sCluster
) -> None:
    objs = render(tools, helm_env, *ON)
    apply(kc, [o for o in objs if o["kind"] in RBAC_KINDS])
    for need in PLANE_NEEDS:
        assert can(kc, *need), need
    for extra in PLANE_MUST_NOT:
        assert not can(kc, *extra), extra


def test_create_namespaces_lets_the_plane_bind_only_the_tenant_role(
    tools: dict[str, Path], helm_env: dict[str, str], kc: K8sCluster
) -> None:
    """As the plane (impersonated): it creates a namespace and binds itself the tenant role
    there; binding any other role (cluster-admin) is refused by RBAC's escalation check."""
    objs = render(tools, helm_env, *ON, "server.createNamespaces=true")
    apply(kc, [o for o in objs if o["kind"] in RBAC_KINDS])
    assert can(kc, "create", "namespaces", "")
    assert not can(kc, "delete", "namespaces", "")
    plane = [
        ("Impersonate-User", USER),
        ("Impersonate-Group", "system:serviceaccounts"),
        ("Impersonate-Group", f"system:serviceaccounts:{NAMESPACE}"),
        ("Impersonate-Group", "system:authenticated"),
    ]
    r = kc.api.post("/api/v1/namespaces", json={"metadata": {"name": "xpupool-new"}}, headers=plane)
    assert r.status_code == 201, r.text

    def binding(role: str) -> dict[str, Any]:
        return {
            "metadata": {"name": f"plane-{role}", "namespace": "xpupool-new"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVER, "namespace": NAMESPACE}],
        }

    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/xpupool-new/rolebindings"
    r = kc.api.post(path, json=binding(TENANT_ROLE), headers=plane)
    assert r.status_code == 201, r.text
    r = kc.api.post(path, json=binding("cluster-admin"), headers=plane)
    assert r.status_code == 403, r.text
    assert "escalat" in r.json()["message"] or "bind" in r.json()["message"], r.text
    # With the tenant role bound, the plane works in the new namespace.
    assert can(kc, "create", "pods", "xpupool-new")
