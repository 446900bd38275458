"""A service on a Kubernetes site, its pure parts (issue 49 part 4): the Deployment and Service
it becomes (the readiness probe, port, image, command, replicas, labels, resource names, owner),
and the ready endpoints read from EndpointSlices, which are validated as strictly as any object
a site sends (a bad slice is refused naming the field)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from xpupool.k8s.codec.pod_request import pod_demand
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.endpoint_slices import SliceBook, SliceEndpoints, read_slice
from xpupool.k8s.site.services import (
    ServicePlan,
    build_deployment,
    build_service,
    object_name,
    vendor_of,
)
from xpupool.model.errors import RequestError
from xpupool.model.request import DeviceRequest, Request
from xpupool.model.request_model import read_spec
from xpupool.server.schemas.services import ServiceIn
from xpupool.server.service_endpoints import Endpoint

DNS_1035 = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def spec(**job: Any) -> ServiceIn:
    body: dict[str, Any] = {
        "name": "chat",
        "port": 8080,
        "job": {"image": "srv:1", "command": ["serve", "--fast"], "spec": "A100:1 site=gpu-a"},
        "readiness": {"path": "/ready", "interval_s": 2.5, "timeout_s": 1, "failures": 4},
        "replicas": {"min": 1, "max": 3},
    }
    body["job"].update(job)
    return ServiceIn.model_validate(body)


def plan(service: ServiceIn | None = None, replicas: int = 2) -> ServicePlan:
    return ServicePlan(
        tenant="ml",
        name="chat",
        queue="ml-q",
        site="gpu-a",
        namespace="xpupool-ml",
        scheduler_name="xpupool-scheduler",
        spec=service or spec(),
        replicas=replicas,
        vendor="nvidia",
    )


def test_a_service_becomes_a_deployment_with_its_probe_port_image_and_replicas() -> None:
    dep = build_deployment(plan())
    assert dep["metadata"] == {
        "name": "xps-chat",
        "namespace": "xpupool-ml",
        "labels": {
            "xpupool.io/service": "chat",
            "xpupool.io/tenant": "ml",
            "xpupool.io/plane-site": "gpu-a",
        },
    }
    assert dep["spec"]["replicas"] == 2
    template = dep["spec"]["template"]
    assert template["metadata"]["labels"]["xpupool.io/queue"] == "ml-q"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    (c,) = template["spec"]["containers"]
    assert (c["image"], c["command"]) == ("srv:1", ["serve", "--fast"])
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert {"name": "PORT", "value": "8080"} in c["env"]
    assert c["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": "http"},
        "periodSeconds": 3,
        "timeoutSeconds": 1,
        "failureThreshold": 4,
        "successThreshold": 1,
    }
    assert template["spec"]["schedulerName"] == "xpupool-scheduler"
    assert template["spec"]["preemptionPolicy"] == "Never"
    # the extender reads the pod as any other: one NVIDIA card, as the request asks
    pod = {"metadata": {"name": "p", **template["metadata"]}, "spec": template["spec"]}
    (demand,) = pod_demand(pod).demands
    assert demand.request.devices.count == 1


def test_the_service_selects_the_deployments_pods_and_is_owned_by_it() -> None:
    dep = build_deployment(plan())
    made = {**dep, "metadata": {**dep["metadata"], "uid": "u-1"}}
    svc = build_service(plan(), made)
    assert svc["metadata"]["name"] == dep["metadata"]["name"]
    (owner,) = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Deployment", "xps-chat", "u-1")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]


def test_what_a_pod_cannot_say_is_refused_naming_the_field() -> None:
    with pytest.raises(RequestError, match=r"job\.secrets"):
        build_deployment(plan(spec(secrets=[{"name": "token"}])))
    no_image = ServiceIn.model_validate({"name": "x", "job": {"command": ["run"]}})
    with pytest.raises(RequestError, match=r"job\.image.*images only"):
        build_deployment(plan(no_image))


@pytest.mark.parametrize("name", ["chat", "a.b_c", "x" * 63, "9lives", "a-"])
def test_object_names_are_kubernetes_names_and_stable(name: str) -> None:
    got = object_name(name)
    assert DNS_1035.fullmatch(got) and got == object_name(name)
    assert object_name("a.b") != object_name("a_b")


def test_the_pods_vendor_is_the_requests_or_the_sites_only_one() -> None:
    one = read_spec("A100:1").to_request()
    assert vendor_of(one, {"nvidia"}, "gpu-a") == "nvidia"
    assert vendor_of(read_spec("cpu=1").to_request(), {"nvidia", "amd"}, "gpu-a") is None
    with pytest.raises(RequestError, match="2 vendors: name one"):
        vendor_of(one, {"nvidia", "amd"}, "gpu-a")
    asked = Request(devices=DeviceRequest(count=1, vendors=("nvidia",)))
    assert vendor_of(asked, {"nvidia", "amd"}, "gpu-a") == "nvidia"


def slice_obj(endpoints: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "xps-chat-abc",
            "namespace": "xpupool-ml",
            "labels": {"kubernetes.io/service-name": "xps-chat"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": 9100}, {"name": "http", "port": 8080}],
        "endpoints": endpoints,
    }
    obj.update(over)
    return obj


def test_a_slice_gives_its_ready_endpoints_on_the_http_port() -> None:
    got = read_slice(
        slice_obj(
            [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.1"]},  # no conditions: ready, as the API says
                {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},
                {"addresses": ["10.0.0.4"], "conditions": {"ready": True, "terminating": True}},
            ]
        )
    )
    assert got == SliceEndpoints("xpupool-ml", "xps-chat", (("10.0.0.1", 8080), ("10.0.0.2", 8080)))


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"endpoints": [{"addresses": ["not-an-ip"]}]}, r"endpoints\[0\]\.addresses\[0\]"),
        ({"endpoints": [{"addresses": ["fd00::1"]}]}, r"endpoints\[0\]\.addresses\[0\]"),
        ({"ports": [{"name": "http", "port": 70000}]}, r"ports\[0\]\.port"),
        ({"endpoints": [{"addresses": ["10.0.0.1"]}] * 1001}, "endpoints"),
        ({"metadata": {"name": "s", "namespace": "n", "labels": {}}}, "service-name"),
    ],
)
def test_a_hostile_slice_is_refused_naming_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError, match=field):
        read_slice({**slice_obj([]), **over})


def test_the_book_merges_a_services_slices_and_forgets_a_deleted_one() -> None:
    book = SliceBook()
    a = read_slice(slice_obj([{"addresses": ["10.0.0.2"]}]))
    b = read_slice(slice_obj([{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]))
    book.on_event(Event(EventType.ADDED, "xpupool-ml/a", "u-a", a))
    book.on_event(Event(EventType.ADDED, "xpupool-ml/b", "u-b", b))
    assert list(book.ready("xpupool-ml", "xps-chat")) == [
        Endpoint(0, 0, "10.0.0.1", 8080),
        Endpoint(0, 0, "10.0.0.2", 8080),
    ]
    assert not book.ready("other", "xps-chat")
    book.on_event(Event(EventType.DELETED, "xpupool-ml/b", "u-b", b))
    assert list(book.ready("xpupool-ml", "xps-chat")) == [Endpoint(0, 0, "10.0.0.2", 8080)]
    book.on_event(Event(EventType.DELETED, "xpupool-ml/a", "u-a", a))
    assert not book.ready("xpupool-ml", "xps-chat")
