"""docs/kubernetes.md against the code and the chart, so the page cannot name a value, an
annotation, a resource or a metric that does not exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from xpupool.k8s.codec import node_annotations, pod_request
from xpupool.k8s.codec.resource_names import DEVICE_KINDS, RESOURCES
from xpupool.k8s.extender import gang
from xpupool.k8s.informers import decoders
from xpupool.k8s.node_agent.hami_register import REGISTER_KEYS
from xpupool.k8s.site import pods as site_pods
from xpupool.k8s.site import services as site_services

ROOT = Path(__file__).parents[3]
DOC = (ROOT / "docs" / "kubernetes.md").read_text()
VALUES = yaml.safe_load((ROOT / "deploy" / "helm" / "xpupool" / "values.yaml").read_text())
# The scheduling gate the chart's MutatingAdmissionPolicy writes, as its helpers define it.
HELPERS = (ROOT / "deploy" / "helm" / "xpupool" / "templates" / "_helpers.tpl").read_text()
CHART_GATE = re.search(r'define "xpupool.admissionGate" -}}([^{]+){{', HELPERS)


def _has_path(tree: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if part == "*":
            return isinstance(tree, dict) and bool(tree)
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def test_every_value_in_the_values_table_is_in_values_yaml() -> None:
    rows = re.findall(r"^\| `([a-zA-Z.*]+)`", DOC, flags=re.MULTILINE)
    named = [
        v
        for row in re.findall(r"^\| (`[^|]+)\|", DOC, flags=re.MULTILINE)
        for v in re.findall(r"`([a-z][a-zA-Z]*\.[a-zA-Z.*]+)`", row)
    ]
    assert len(rows) > 10
    missing = [v for v in named if not _has_path(VALUES, v)]
    assert not missing, missing


def test_every_xpupool_annotation_the_doc_names_is_one_the_code_reads_or_writes() -> None:
    known = {
        node_annotations.DEVICES_KEY,
        node_annotations.HEARTBEAT_KEY,
        decoders.SITE_LABEL,
        gang.GANG_ANNOTATION,
        gang.GANG_SIZE_ANNOTATION,
        *([CHART_GATE.group(1)] if CHART_GATE else []),
        *(site_pods.JOB, site_pods.REPLICA, site_pods.ATTEMPT, site_pods.TENANT),
        *(site_pods.QUEUE, site_pods.SITE, site_services.SERVICE),
        *(
            getattr(pod_request, name)
            for name in dir(pod_request)
            if name.startswith("ANNOTATION_")
        ),
    }
    named = {n.rstrip("-") for n in re.findall(r"xpupool\.io/[a-z-]+", DOC)}  # kubectl: key-
    assert named and named <= known, named - known


def test_every_resource_name_and_register_key_the_doc_names_exists() -> None:
    register = {k.register_key for k in DEVICE_KINDS if k.register_key}
    for quoted in re.findall(r"`([a-z.-]+\.(?:com|ai)/[A-Za-z0-9.-]+)`", DOC):
        name = quoted.removeprefix("limits.")  # a ResourceQuota's key on the resource
        if "<" in name or name.startswith(("nvidia.com/use-", "nvidia.com/nouse-")):
            continue
        kinds_keys = {
            k
            for kind in DEVICE_KINDS
            for k in (kind.use_type_key, kind.use_uuid_key, kind.mode_key, kind.numa_bind_key)
        }
        assert name in RESOURCES or name in kinds_keys or _unmodelled(name), name
    for key in re.findall(r"hami\.io/node-[A-Za-z0-9<>*-]*register[A-Za-z0-9<>*-]*", DOC):
        if "<" not in key and "*" not in key:  # a pattern, not a key
            assert key in register, key
    assert set(re.findall(r"hami\.io/node-nvidia-register", DOC)) <= REGISTER_KEYS


UNMODELLED = {
    "enflame.com/drs-gcu",
    "enflame.com/gcu-memory",
    "enflame.com/gcu-core",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "vastaitech.com/va",
    "birentech.com/gpu",
}


def _unmodelled(name: str) -> bool:
    """HAMi's managed resources the doc says the extender does not model (and the chart leaves
    out of its managed resources)."""
    return name in UNMODELLED and name not in VALUES["extender"]["managedResources"]


def test_the_pod_example_is_read_as_the_doc_says() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, flags=re.DOTALL)
    pods = [d for b in blocks for d in [yaml.safe_load(b)] if d.get("kind") == "Pod"]
    (pod,) = pods
    pod["metadata"]["uid"] = "u"
    demand = pod_request.pod_demand(pod)
    (container,) = demand.demands
    devices = container.request.devices
    assert devices.count == 1 and devices.memory_mib == 20000
    assert devices.core_permille == 300
    assert set(devices.type_contains) == {"A100", "H100"}


def test_every_metric_the_doc_names_is_exported() -> None:
    """Names as a scrape shows them: the extender's registry and a node agent's after a pass."""
    from prometheus_client import CollectorRegistry, generate_latest

    from xpupool.agent.monitor import Monitor
    from xpupool.k8s.extender.http_app import ExtenderMetrics
    from xpupool.k8s.node_agent.agent import NodeAgent, make_registry
    from xpupool.probes import FakeProbe
    from xpupool.server import stranded_gauges

    registry = CollectorRegistry()
    metrics = ExtenderMetrics(registry)
    metrics.calls.labels("filter", "ok").inc()
    metrics.seconds.labels("filter").observe(0.01)
    agent = NodeAgent(
        None, "n", Monitor([FakeProbe(ROOT / "tests/fixtures/agent/fake-a100x2.yaml")])
    )  # type: ignore[arg-type]
    agent.reading = agent.monitor.read()
    agent.stats.last_heartbeat = 1.0
    agent.stats.writes["xpupool.io/heartbeat"] = 1
    text = (generate_latest(registry) + generate_latest(make_registry(agent))).decode()
    exported = set(re.findall(r"^(xpupool_[a-z_]+)", text, flags=re.MULTILINE))
    exported |= {n.removesuffix("_bucket") for n in exported}
    # the stranded gauges need a learned workload (tests/unit/k8s/test_extender_stranded.py)
    exported |= {stranded_gauges.MEMORY, stranded_gauges.CORES}
    named = set(re.findall(r"`(xpupool_[a-z_]+)", DOC))
    assert len(named) > 5
    assert named <= exported, named - exported
    # `..._power_watts`: a device gauge the fake probe cannot fill, so looked up in its source
    gauges = (ROOT / "src" / "xpupool" / "agent" / "metrics.py").read_text()
    for short in re.findall(r"`\.\.\.(_[a-z_]+)`", DOC):
        assert any(n.endswith(short) for n in exported) or f'"{short[1:]}"' in gauges, short
