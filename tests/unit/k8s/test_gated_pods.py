"""A kubectl user's gated pod read as the job the plane submits for it (issue 49, part 3): the
request from its resources and annotations through the extender's codec, its queue from its
label, its tenant from its namespace; bad ones refused naming the pod's field (the site then
posts the reason as an Event and admits nothing); the patch that removes only xpupool's gate."""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.k8s.site.gated import (
    GATE,
    event_object,
    gate_patch,
    has_gate,
    job_of_pod,
    read_gated_pod,
    tenant_of_namespace,
)
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError

SITE = "gpu-a"


def pod(
    limits: dict[str, str] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    gates: tuple[str, ...] = (GATE,),
) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": "main", "image": "train:1"}
    if limits is not None:
        ctr["resources"] = {"limits": limits}
    return {
        "metadata": {
            "name": "p1",
            "namespace": "xpupool-ml",
            "uid": "u-1",
            "labels": {"xpupool.io/queue": "ml"} if labels is None else labels,
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [ctr] if containers is None else containers,
            "schedulingGates": [{"name": g} for g in gates],
        },
    }


def test_a_gated_pod_asks_for_what_its_resources_and_annotations_say() -> None:
    obj = pod(
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20000", "cpu": "4", "memory": "16Gi"},
        annotations={"xpupool.io/request": '{"devices": {"models": ["A100"]}}'},
    )
    got = read_gated_pod(obj, SITE)
    assert (got.namespace, got.name, got.uid, got.queue, got.image) == (
        "xpupool-ml",
        "p1",
        "u-1",
        "ml",
        "train:1",
    )
    req = got.request
    assert (req.devices.count, req.devices.memory_mib) == (2, 20000)
    assert req.devices.models == ("A100",)
    assert (req.cpu_milli, req.memory_mib) == (4000, 16 * 1024)
    assert (req.queue, req.sites, req.replicas) == ("ml", (SITE,), 1)
    body = job_of_pod(got, "ml")
    assert (body.tenant, body.queue, body.image, body.max_retries) == ("ml", "ml", "train:1", 0)
    assert body.name == "pod xpupool-ml/p1"
    assert body.request is not None
    back = body.request.to_request()
    assert (back.devices.count, back.devices.memory_mib, back.sites) == (2, 20000, (SITE,))
    assert back.devices.models == ("A100",)
    assert (back.cpu_milli, back.memory_mib) == (4000, 16 * 1024)


def test_a_pod_without_devices_asks_for_its_cpu_and_memory_as_kube_counts_them() -> None:
    init = {"name": "fetch", "image": "x:1", "resources": {"requests": {"cpu": "8"}}}
    app = {"name": "main", "image": "train:1", "resources": {"requests": {"memory": "1Gi"}}}
    side = {"name": "log", "image": "y:1", "resources": {"requests": {"cpu": "500m"}}}
    obj = pod(containers=[app, side])
    obj["spec"]["initContainers"] = [init]
    req = read_gated_pod(obj, SITE).request
    assert req.devices.count == 0
    assert (req.cpu_milli, req.memory_mib) == (8000, 1024)  # the init container's 8 CPUs


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        (
            pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"}),
            'spec.containers[0].resources.limits["nvidia.com/gpumem"]',
            "",
        ),
        (
            pod({"nvidia.com/gpu": "1"}, annotations={"xpupool.io/request": "{not json"}),
            'metadata.annotations["xpupool.io/request"]',
            "",
        ),
        (
            pod({"nvidia.com/gpu": "1"}, annotations={"xpupool.io/queue": "other"}),
            'metadata.annotations["xpupool.io/queue"]',
            "label names queue 'ml'",
        ),
        (
            pod({"nvidia.com/gpu": "1"}, annotations={"xpupool.io/site": "elsewhere"}),
            'metadata.annotations["xpupool.io/site"]',
            "may not name another site",
        ),
        (
            pod(
                containers=[
                    {"name": n, "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    for n in ("a", "b")
                ]
            ),
            "spec.containers",
            "one container that asks for devices",
        ),
        (pod(containers=[{"name": "main"}]), "spec.containers[0].image", "runs an image"),
        (pod(labels={}), 'metadata.labels["xpupool.io/queue"]', "names the queue"),
        (
            pod({"nvidia.com/gpu": "1"}, annotations={"nvidia.com/use-gputype": "A100"}),
            'metadata.annotations["nvidia.com/use-gputype"]',
            "names card models in xpupool.io/request",
        ),
    ],
    ids=[
        "quantity",
        "request-json",
        "queue",
        "site",
        "two-device-containers",
        "image",
        "label",
        "hami-type",
    ],
)
def test_a_bad_pod_is_refused_naming_its_field(obj: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(RequestError) as got:
        read_gated_pod(obj, SITE)
    assert got.value.field == field, got.value
    assert words in str(got.value)


def test_the_patch_tests_and_removes_only_xpupools_gate() -> None:
    obj = pod(gates=("example.com/wait", GATE))
    assert has_gate(obj)
    assert gate_patch(obj) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
    other = pod(gates=("example.com/wait",))
    assert not has_gate(other) and gate_patch(other) is None


def test_a_namespace_names_its_tenant_by_the_mapping_or_the_prefix() -> None:
    config = KubernetesSiteConfig(
        name=SITE, in_cluster=True, namespaces={"research": "lab", "ml": "shared"}
    )
    assert tenant_of_namespace(config, "lab") == "research"
    assert tenant_of_namespace(config, "xpupool-ops") == "ops"
    assert tenant_of_namespace(config, "xpupool-ml") is None  # ml's namespace is "shared"
    assert tenant_of_namespace(config, "default") is None
    assert tenant_of_namespace(config, "xpupool-") is None


def test_the_refusal_is_a_warning_event_on_the_pod() -> None:
    where = {"namespace": "xpupool-ml", "name": "p1", "uid": "u-1"}
    ev = event_object(where, "x" * 5000, SITE)
    assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", **where}
    assert (ev["type"], ev["reason"], len(ev["message"])) == ("Warning", "NotAdmitted", 1024)
    assert ev["metadata"] == {"generateName": "p1.", "namespace": "xpupool-ml"}
