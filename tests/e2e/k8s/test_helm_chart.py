"""The Helm chart (deploy/helm/xpupool) against the real tools: ``helm template`` (helm built from
its Go module by tools/k8s/build.sh) renders it, the real kube-apiserver accepts every rendered
object (``kubectl apply --dry-run=server --validate=strict``: schema, unknown fields, CEL of the
admission policy, RBAC references), and the real kube-scheduler starts, leads and becomes ready
with the rendered KubeSchedulerConfiguration (it decodes it strictly, so a misspelt field stops
it). The extender the configuration points at need not run for readiness.

The ServiceMonitor kind is not in a bare apiserver: the module installs a minimal CRD for it, a
subset of the Prometheus Operator's own schema with only the fields the chart writes, so a field
the chart misspells is refused there too. Missing binaries fail, never skip.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from cluster import (
    ROOT,
    K8sCluster,
    K8sStartError,
    find_binaries,
    require_binaries,
    write_kubeconfig,
)

from xpupool import cli
from xpupool.engine.profile_file import load_profile_file
from xpupool.k8s.codec.resource_names import RESOURCES

pytestmark = pytest.mark.k8s

CHART = ROOT / "deploy" / "helm" / "xpupool"
RELEASE = "xp"
NAMESPACE = "xpupool-system"
KUBE_VERSION = "1.36.3"  # the control plane tools/k8s/build.sh builds

# Names every rendering must keep: the scheduler's profile and HAMi's NVIDIA resources (HAMi
# v2.10.0 charts/hami/values.yaml resourceName/resourceMem/resourceCores/resourceMemPercentage,
# commit 4707fb02c91c).
HAMI_NVIDIA = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
)

# The ServiceMonitor CRD, cut down to the fields the chart writes. Names and types follow the
# Prometheus Operator's monitoring.coreos.com_servicemonitors.yaml (prometheus-operator
# example/prometheus-operator-crd/, operator 0.84.1): spec.jobLabel, spec.selector (a label
# selector), spec.namespaceSelector.matchNames, spec.endpoints[].{port, path, interval,
# scrapeTimeout, authorization.{type, credentials}} (credentials a SecretKeySelector). No
# x-kubernetes-preserve-unknown-fields: an unknown field is an error.
_DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["selector"],
                                "properties": {
                                    "jobLabel": {"type": "string"},
                                    "selector": {
                                        "type": "object",
                                        "properties": {
                                            "matchLabels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            }
                                        },
                                    },
                                    "namespaceSelector": {
                                        "type": "object",
                                        "properties": {
                                            "any": {"type": "boolean"},
                                            "matchNames": {
                                                "type": "array",
                                                "items": {"type": "string"},
                                            },
                                        },
                                    },
                                    "endpoints": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "port": {"type": "string"},
                                                "path": {"type": "string"},
                                                "interval": {
                                                    "type": "string",
                                                    "pattern": _DURATION,
                                                },
                                                "scrapeTimeout": {
                                                    "type": "string",
                                                    "pattern": _DURATION,
                                                },
                                                "authorization": {
                                                    "type": "object",
                                                    "properties": {
                                                        "type": {"type": "string"},
                                                        "credentials": {
                                                            "type": "object",
                                                            "required": ["key"],
                                                            "properties": {
                                                                "key": {"type": "string"},
                                                                "name": {"type": "string"},
                                                                "optional": {"type": "boolean"},
                                                            },
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


# -- tools ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    """helm and kubectl from the build cache (a failure, never a skip, when absent)."""
    return require_binaries(("helm", "kubectl"))


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's config, cache and data homes in a temp dir: a test leaves nothing in $HOME."""
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(home / var.lower())
    return env


def helm_template(
    tools: dict[str, Path],
    env: dict[str, str],
    *sets: str,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart as ``release`` in ``namespace``, with ``--set`` values."""
    args = [str(tools["helm"]), "template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION, *extra]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


def render(tools: dict[str, Path], env: dict[str, str], *sets: str) -> list[dict[str, Any]]:
    """The rendered objects (empty documents dropped); a helm failure fails the test."""
    out = helm_template(tools, env, *sets)
    assert out.returncode == 0, f"helm template failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


# An engine profile file (docs/profiles.md) as the extender.profiles value.
PROFILE_FILE = {
    "apiVersion": "xpupool/v1",
    "kind": "SchedulerConfiguration",
    "profiles": [{"name": "packed", "base": "binpack"}],
}


def render_with_profile(
    tools: dict[str, Path], env: dict[str, str], *sets: str
) -> list[dict[str, Any]]:
    out = helm_template(
        tools, env, *sets, extra=("--set-json", f"extender.profiles={json.dumps(PROFILE_FILE)}")
    )
    assert out.returncode == 0, f"helm template failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def only(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = only(objs, "ConfigMap", f"{RELEASE}-xpupool-scheduler")
    cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert isinstance(cfg, dict)
    return cfg


def container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name!r}"
    return found[0]


# -- rendering --------------------------------------------------------------------------------


def test_defaults_render_the_scheduler_pair_and_the_agent(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    objs = render(tools, helm_env)
    kinds = sorted(o["kind"] for o in objs)
    assert "ServiceMonitor" not in kinds  # off by default
    for kind in ("Deployment", "DaemonSet", "ConfigMap", "ClusterRole", "Service"):
        assert kind in kinds

    cfg = scheduler_config(objs)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["profiles"] == [{"schedulerName": "xpupool"}]
    assert cfg["percentageOfNodesToScore"] == 100
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True
    assert le["resourceName"] == "xpupool-scheduler"  # never the default scheduler's lease
    assert le["resourceNamespace"] == NAMESPACE
    (ext,) = cfg["extenders"]
    assert ext["nodeCacheCapable"] is True
    assert ext["ignorable"] is False
    for verb in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
        assert ext[verb]
    names = [r["name"] for r in ext["managedResources"]]
    assert all(r["ignoredByScheduler"] is True for r in ext["managedResources"])
    assert len(names) == len(set(names))  # kube-scheduler refuses a name twice
    assert set(HAMI_NVIDIA) <= set(names)
    # every name the extender models, and none it does not: a managed name nobody models would
    # be checked neither by kube-scheduler (ignoredByScheduler) nor by the extender
    assert set(names) == set(RESOURCES)

    # The extender listens where the urlPrefix points, on loopback only.
    deploy = only(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    args = container(pod, "extender")["args"]
    assert args[:2] == ["k8s", "extender"]
    port = ext["urlPrefix"].rsplit(":", 1)[1]
    assert ext["urlPrefix"] == f"http://127.0.0.1:{port}"
    assert f"--listen=127.0.0.1:{port}" in args
    assert "--kubeconfig=/etc/xpupool/kubeconfig" in args
    sched = container(pod, "kube-scheduler")
    assert sched["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"
    assert "--config=/etc/xpupool/scheduler-config.yaml" in sched["command"]

    # The agent names its own node from the downward API and runs unprivileged.
    ds = only(objs, "DaemonSet")
    agent = container(ds["spec"]["template"]["spec"], "agent")
    assert agent["args"][:3] == ["k8s", "agent", "--node-name=$(NODE_NAME)"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "privileged" not in agent["securityContext"]
    assert agent["securityContext"]["runAsNonRoot"] is True


def test_service_monitor_scrapes_both_metrics_services(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    objs = render(tools, helm_env, "serviceMonitor.enabled=true")
    sm = only(objs, "ServiceMonitor")
    selector = sm["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in sm["spec"]["endpoints"]}
    services = [o for o in objs if o["kind"] == "Service"]
    assert len(services) == 2
    for svc in services:
        labels = svc["metadata"]["labels"]
        assert selector.items() <= labels.items(), svc["metadata"]["name"]
        assert ports <= {p["name"] for p in svc["spec"]["ports"]}


def test_a_metrics_token_guards_both_ports_and_the_service_monitor_sends_it(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    """metricsToken.secretName: the extender and every agent mount the Secret's key as one file
    and require it (--metrics-token-file, parsed by the real command line), and each
    ServiceMonitor endpoint sends it; without it none of that is rendered."""
    objs = render(
        tools, helm_env, "serviceMonitor.enabled=true", "metricsToken.secretName=xp-metrics"
    )
    for endpoint in only(objs, "ServiceMonitor")["spec"]["endpoints"]:
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "xp-metrics", "key": "token"},
        }
    token = tmp_path / "token"
    token.write_text("s3cret")
    pods = {
        "agent": only(objs, "DaemonSet")["spec"]["template"]["spec"],
        "extender": only(objs, "Deployment")["spec"]["template"]["spec"],
    }
    for name, pod in pods.items():
        box = container(pod, name)
        (mount,) = [m for m in box["volumeMounts"] if m["name"] == "metrics-token"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "metrics-token"]
        assert volume["secret"] == {
            "secretName": "xp-metrics",
            "items": [{"key": "token", "path": "token"}],
        }
        assert mount["readOnly"] is True
        flag = f"--metrics-token-file={mount['mountPath']}/token"
        assert flag in box["args"]
        args = [a.replace(f"{mount['mountPath']}/token", str(token)) for a in box["args"]]
        for key, text in only(objs, "ConfigMap")["data"].items():
            (tmp_path / key).write_text(text)
        ctx = parse_command(args, tmp_path)
        assert Path(ctx.params["metrics_token_file"]) == token

    plain = render(tools, helm_env, "serviceMonitor.enabled=true")
    assert "authorization" not in only(plain, "ServiceMonitor")["spec"]["endpoints"][0]
    assert "metrics-token" not in json.dumps(plain)


def test_options_reach_the_commands(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    """A profile file becomes --profile and a ConfigMap key the engine's own loader accepts;
    the agent turns privileged and writes HAMi's register annotation only when asked."""
    objs = render_with_profile(tools, helm_env, "agent.privileged=true", "agent.hamiRegister=true")
    cm = only(objs, "ConfigMap")
    (tmp_path / "profiles.yaml").write_text(cm["data"]["profiles.yaml"])
    assert list(load_profile_file(tmp_path / "profiles.yaml")) == ["packed"]
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    assert "--profile=/etc/xpupool/profiles.yaml" in container(pod, "extender")["args"]
    agent = container(only(objs, "DaemonSet")["spec"]["template"]["spec"], "agent")
    assert agent["securityContext"]["privileged"] is True
    assert "--hami-register" in agent["args"]


def parse_command(args: list[str], config_dir: Path) -> click.Context:
    """Parse a rendered container's ``args`` with the real ``xpupool`` command line (options and
    their checks, the command itself not run), the pod's ``$(NODE_NAME)`` and config mount
    replaced by a test node name and ``config_dir``."""
    args = [
        a.replace("$(NODE_NAME)", "gpu-node-1").replace("/etc/xpupool", str(config_dir))
        for a in args
    ]
    group: click.Command = cli.main
    ctx = group.make_context("xpupool", args, resilient_parsing=True)
    for word in args:
        if not isinstance(group, click.Group) or word.startswith("-"):
            break
        cmd = group.get_command(ctx, word)
        if cmd is None:
            pytest.skip(f"no command 'xpupool ... {word}' in this tree yet")
        rest = args[args.index(word) + 1 :]
        ctx = cmd.make_context(word, rest, parent=ctx, resilient_parsing=False)
        group = cmd
    return ctx


def test_agent_args_are_the_real_commands(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    objs = render(tools, helm_env, "agent.hamiRegister=true")
    agent = container(only(objs, "DaemonSet")["spec"]["template"]["spec"], "agent")
    ctx = parse_command(agent["args"], tmp_path)
    assert ctx.info_name == "agent"
    assert ctx.params["node_name"] == "gpu-node-1"
    assert ctx.params["metrics_at"] == ("0.0.0.0", 9400)
    assert ctx.params["hami_register"] is True
    with pytest.raises(click.UsageError):  # the parse is a real check
        parse_command([*agent["args"], "--no-such-flag"], tmp_path)


def test_extender_args_are_the_real_commands(
    tools: dict[str, Path], helm_env: dict[str, str], tmp_path: Path
) -> None:
    """The extender container's arguments, with the ConfigMap's files where they are mounted."""
    objs = render_with_profile(tools, helm_env, "extender.policy=packed")
    for key, text in only(objs, "ConfigMap")["data"].items():
        (tmp_path / key).write_text(text)
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    ctx = parse_command(container(pod, "extender")["args"], tmp_path)
    assert ctx.info_name == "extender"
    assert ctx.params["listen"] == ("127.0.0.1", 8888)
    assert ctx.params["policy"] == "packed"
    assert ctx.params["profile_file"] == str(tmp_path / "profiles.yaml")
    assert ctx.params["metrics_at"] == ("0.0.0.0", 9401)


def test_admission_policy_names_the_charts_node_agent(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    """The policy's matchCondition names the very service account the DaemonSet runs as (a
    mismatch would leave every agent unchecked), and turning it off drops policy and binding."""
    objs = render(tools, helm_env)
    ds = only(objs, "DaemonSet")
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    only(objs, "ServiceAccount", sa)
    vap = only(objs, "ValidatingAdmissionPolicy")
    (cond,) = vap["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{NAMESPACE}:{sa}"' in cond["expression"]
    binding = only(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]

    off = render(tools, helm_env, "agent.admissionPolicy.enabled=false")
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]


def test_admission_policy_is_the_plain_manifest(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    """The chart's policy is deploy/policies/node-agent-vap.yaml with only names templated:
    rendered as release "xpupool" in namespace "xpupool" (the plain manifest's names), the two
    agree field for field, labels aside."""
    plain_path = ROOT / "deploy" / "policies" / "node-agent-vap.yaml"
    if not plain_path.is_file():
        pytest.skip(f"{plain_path.relative_to(ROOT)} is not in this tree (branch k8s-agent)")
    plain = [d for d in yaml.safe_load_all(plain_path.read_text()) if d]
    out = helm_template(
        tools,
        helm_env,
        release="xpupool",
        namespace="xpupool",
        extra=("--show-only", "templates/node-agent-vap.yaml"),
    )
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    for doc in rendered:
        doc["metadata"].pop("labels")
    assert rendered == plain


@pytest.mark.parametrize(
    ("value", "field"),
    [
        # values.schema.json, which helm checks before rendering: the path and the reason
        ("extender.weight=0", "/extender/weight"),
        ("extender.wieght=2", "'wieght' not allowed"),
        ("extender.managedResources=null", "missing property 'managedResources'"),
        ("extender.managedResources[0]=gpu", "/extender/managedResources/0"),
        ("extender.httpTimeout=30", "/extender/httpTimeout"),
        ("scheduler.percentageOfNodesToScore=101", "/scheduler/percentageOfNodesToScore"),
        ("agent.hostPaths[0].name=x", "/agent/hostPaths/0"),
        ("metricsToken.secretName=Bad_Name", "/metricsToken/secretName"),
        # the templates' own checks, across fields
        ("scheduler.leaderElection.enabled=false", "scheduler.leaderElection.enabled"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    tools: dict[str, Path], helm_env: dict[str, str], value: str, field: str
) -> None:
    out = helm_template(tools, helm_env, value)
    assert out.returncode != 0
    assert field in out.stderr, out.stderr


# -- the real control plane -------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tools: dict[str, Path]) -> Iterator[K8sCluster]:
    """One control plane for the module, with NAMESPACE and the ServiceMonitor CRD in it."""
    with K8sCluster(scheduler=False) as kc:  # the tests start the rendered one
        r = kc.api.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        assert r.status_code == 201, r.text
        r = kc.api.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=SERVICE_MONITOR_CRD
        )
        assert r.status_code == 201, r.text
        wait_crd_established(kc, SERVICE_MONITOR_CRD["metadata"]["name"])
        yield kc


def wait_crd_established(kc: K8sCluster, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        crd = kc.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        # status and its conditions are null for a moment after the CRD is created
        conditions = (crd.json().get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {name} not established after {timeout_s}s")


def kubectl_dry_run(
    tools: dict[str, Path], kc: K8sCluster, objs: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply --dry-run=server --validate=strict`` of ``objs``: the apiserver runs
    defaulting, validation, admission and field checks, and stores nothing."""
    manifest = yaml.safe_dump_all(objs, sort_keys=False)
    return subprocess.run(
        [
            str(tools["kubectl"]),
            f"--kubeconfig={kc.kubeconfig}",
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-o",
            "name",
            "-f",
            "-",
        ],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=120,
    )


def kubectl_name(obj: dict[str, Any]) -> str:
    """``kubectl -o name``'s form: ``<resource>.<group>/<name>``, the group empty for core."""
    group = obj["apiVersion"].rpartition("/")[0]
    resource = obj["kind"].lower()
    return (
        f"{resource}.{group}/{obj['metadata']['name']}"
        if group
        else f"{resource}/{obj['metadata']['name']}"
    )


@pytest.mark.parametrize(
    "sets",
    [
        (),
        (
            "serviceMonitor.enabled=true",
            "agent.privileged=true",
            "metricsToken.secretName=xp-metrics",
        ),
    ],
    ids=["defaults", "all-on"],
)
def test_apiserver_accepts_every_rendered_object(
    tools: dict[str, Path], helm_env: dict[str, str], cluster: K8sCluster, sets: tuple[str, ...]
) -> None:
    objs = render(tools, helm_env, *sets)
    out = kubectl_dry_run(tools, cluster, objs)
    assert out.returncode == 0, f"the apiserver refused the chart:\n{out.stderr}"
    accepted = set(out.stdout.split())
    for obj in objs:
        assert kubectl_name(obj) in accepted, (kubectl_name(obj), sorted(accepted))
    # A dry run stores nothing.
    r = cluster.api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
    assert r.json()["items"] == []


def test_apiserver_refuses_a_misspelt_field(
    tools: dict[str, Path], helm_env: dict[str, str], cluster: K8sCluster
) -> None:
    """The dry run is a real check: one unknown field in the rendered Deployment is refused."""
    objs = render(tools, helm_env)
    bad = copy.deepcopy(objs)
    only(bad, "Deployment")["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "x"
    out = kubectl_dry_run(tools, cluster, bad)
    assert out.returncode != 0
    assert "imagePulPolicy" in out.stderr


def runnable_config(objs: list[dict[str, Any]], kc: K8sCluster) -> dict[str, Any]:
    """The rendered KubeSchedulerConfiguration with the one thing a pod gets from its service
    account instead: the kubeconfig of the test apiserver."""
    cfg = scheduler_config(objs)
    cfg["clientConnection"] = {"kubeconfig": str(kc.kubeconfig)}
    return cfg


def test_kube_scheduler_runs_the_rendered_configuration(
    tools: dict[str, Path], helm_env: dict[str, str], cluster: K8sCluster
) -> None:
    objs = render(tools, helm_env)
    cfg = runnable_config(objs, cluster)
    cluster.start_scheduler(cfg, name="xpupool-scheduler")
    # Leader election is on: the scheduler takes the Lease the configuration names.
    le = cfg["leaderElection"]
    assert lease_holder(cluster, le["resourceNamespace"], le["resourceName"])


def lease_holder(kc: K8sCluster, namespace: str, name: str, timeout_s: float = 30.0) -> str:
    """The Lease's holderIdentity once it has one ("" if none within ``timeout_s``)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = kc.api.get(path)
        holder = r.json().get("spec", {}).get("holderIdentity", "") if r.status_code == 200 else ""
        if holder:
            return str(holder)
        time.sleep(0.2)
    return ""


def sa_user(objs: list[dict[str, Any]], kind: str) -> str:
    """The user a workload's pods act as: its pod template's service account."""
    sa = only(objs, kind)["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{NAMESPACE}:{sa}"


# What each workload's pods do, and what they must not: (verb, resource[/name], namespace or ""
# for all, subresource or "").
Access = tuple[str, str, str, str]
EXTENDER_NEEDS: list[Access] = [
    ("watch", "nodes", "", ""),
    ("patch", "nodes", "", ""),  # HAMi's node lock (node_lock.py)
    ("list", "pods", "", ""),
    ("watch", "pods", "", ""),
    ("patch", "pods", "team-a", ""),
    ("create", "pods", "team-a", "binding"),
    ("list", "podgroups.scheduling.x-k8s.io", "team-a", ""),
    ("list", "resourcequotas", "", ""),  # namespaces' quotas on card resources
    ("watch", "resourcequotas", "", ""),
    ("create", "leases.coordination.k8s.io", NAMESPACE, ""),
    ("update", "leases.coordination.k8s.io/xpupool-extender", NAMESPACE, ""),
]
# (The pod's account may delete pods: system:kube-scheduler grants it, for preemption.)
EXTENDER_MUST_NOT: list[Access] = [
    ("delete", "nodes", "", ""),
    ("create", "pods", "team-a", ""),
    ("get", "secrets", "", ""),
]
AGENT_NEEDS: list[Access] = [("get", "nodes", "", ""), ("patch", "nodes", "", "")]
AGENT_MUST_NOT: list[Access] = [
    ("patch", "nodes", "", "status"),
    ("delete", "nodes", "", ""),
    ("list", "nodes", "", ""),
    ("list", "pods", "", ""),
]


def test_rbac_gives_each_workload_what_it_needs(
    tools: dict[str, Path], helm_env: dict[str, str], cluster: K8sCluster
) -> None:
    """The chart's RBAC, applied for real: the extender's and the agent's service accounts may
    do their work and nothing asked beyond it (kubectl auth can-i, impersonating them), and
    kube-scheduler running as the scheduler pod's service account syncs its informers and takes
    its Lease (it waits for every informer before it campaigns, so a missing list/watch right
    stops it short of the Lease)."""
    objs = render(tools, helm_env)
    rbac_kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    rbac = [o for o in objs if o["kind"] in rbac_kinds]
    applied = subprocess.run(
        [str(tools["kubectl"]), f"--kubeconfig={cluster.kubeconfig}", "apply", "-f", "-"],
        input=yaml.safe_dump_all(rbac),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr

    def can(user: str, verb: str, resource: str, namespace: str, subresource: str) -> bool:
        """A SubjectAccessReview for ``user`` (with a service account's groups)."""
        resource, _, name = resource.partition("/")
        resource, _, group = resource.partition(".")
        sa_namespace = user.split(":")[2]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{sa_namespace}",
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
        out = cluster.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(out["status"].get("allowed"))

    scheduler, agent = sa_user(objs, "Deployment"), sa_user(objs, "DaemonSet")
    for user, needs, must_not in (
        (scheduler, EXTENDER_NEEDS, EXTENDER_MUST_NOT),
        (agent, AGENT_NEEDS, AGENT_MUST_NOT),
    ):
        for need in needs:
            assert can(user, *need), (user, need)
        for extra in must_not:
            assert not can(user, *extra), (user, extra)

    # kube-scheduler as the scheduler pod: its own kubeconfig with that account's token.
    namespace, name = scheduler.split(":")[2:]
    kubeconfig = cluster.dir / "scheduler-sa.kubeconfig"
    write_kubeconfig(kubeconfig, cluster.api_url, token=cluster.token(namespace, name))
    cfg = scheduler_config(objs)
    cfg["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    cfg["leaderElection"]["resourceName"] = "xpupool-scheduler-as-sa"
    cluster.start_scheduler(cfg, name="scheduler-as-sa")
    assert lease_holder(cluster, namespace, "xpupool-scheduler-as-sa"), cluster.log(
        "scheduler-as-sa"
    )[-3000:]


def test_kube_scheduler_knows_the_rendered_flags(
    tools: dict[str, Path], helm_env: dict[str, str]
) -> None:
    """The Deployment's kube-scheduler command line uses only flags the binary has."""
    pod = only(render(tools, helm_env), "Deployment")["spec"]["template"]["spec"]
    command = container(pod, "kube-scheduler")["command"]
    assert command[0] == "kube-scheduler"
    binary = find_binaries(("kube-scheduler",))["kube-scheduler"]
    helped = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30)
    known = set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", helped.stdout, re.MULTILINE))
    assert "--config" in known  # the help was read
    for flag in command[1:]:
        assert flag.split("=", 1)[0] in known, flag


def test_kube_scheduler_refuses_a_misspelt_configuration(
    tools: dict[str, Path], helm_env: dict[str, str], cluster: K8sCluster
) -> None:
    """kube-scheduler decodes its configuration strictly, so the readiness above means every
    field name was right: a misspelt one stops it before it is ready."""
    cfg = runnable_config(render(tools, helm_env), cluster)
    cfg["extenders"][0]["nodeCacheCapabel"] = True
    with pytest.raises(K8sStartError, match="nodeCacheCapabel"):
        cluster.start_scheduler(cfg, name="misspelt-scheduler")
