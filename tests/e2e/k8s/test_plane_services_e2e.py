"""A service on a Kubernetes site (issue 49 part 4), on a real control plane: etcd,
kube-apiserver, kube-scheduler and kube-controller-manager (deployment, replicaset,
endpointslice, garbage collector) on 127.0.0.1, and ``xpupool up --sites FILE`` (a real
process) managing the cluster as site :data:`SITE`.

A service whose job names the site becomes a Deployment plus a Service in its tenant's namespace,
with the service's readiness probe, port, image, command and replicas; the Service is owned by the
Deployment. The proxy forwards to the Service's ready endpoints as its EndpointSlices list them:
nothing here runs a kubelet (no kwok: a kwok pod would serve no traffic either), so the
Deployment's pods never get an address and the endpointslice controller's slice stays empty; the
test writes a second slice by hand for the same Service, pointing at a real local HTTP process on
a non-loopback address of this machine (the apiserver refuses 127.0.0.0/8 in a slice). Requests
held in flight there make the plane scale the Deployment up, and down once they end. Deleting
the service deletes both objects (and the garbage collector the pods).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import CONTROLLER_MANAGER, K8sCluster, require_binaries

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = pytest.mark.k8s

SITE = "gpu-a"
NS = "xpupool-ml"
NAME = "xps-web"  # the Deployment's and the Service's name for service "web"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"


def node(name: str) -> dict[str, Any]:
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-80GB",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i in range(2)
    ]
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "20"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def local_address() -> str:
    """An IPv4 address of this machine that is not loopback (no packet is sent: a UDP socket's
    connect only picks the route's source address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))
        address = str(s.getsockname()[0])
    assert not address.startswith("127."), "no non-loopback IPv4 address on this machine"
    return address


class Backend(BaseHTTPRequestHandler):
    """The service's process: ``/hello`` answers at once, ``/slow`` once :attr:`release` is
    set (bounded), so a test holds requests in flight as long as it needs."""

    release = threading.Event()
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.endswith("/slow"):
            type(self).release.wait(60)
        body = f"hello from {self.server.server_address[0]} {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[K8sCluster, ServerProc]]:
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", CONTROLLER_MANAGER))
    tmp = tmp_path_factory.mktemp("plane-services")
    with K8sCluster(tmp / "cluster", controller_manager=True) as kc:
        for name in ("kw-0", "kw-1"):
            kc.create("/api/v1/nodes", node(name))
        sites = tmp / "sites.yaml"
        sites.write_text(
            f"sites:\n  - name: {SITE}\n    kubeconfig: {kc.kubeconfig}\n"
            "    create_namespaces: true\n"
        )
        with ServerProc(tmp / "data", extra_args=("--sites", str(sites))) as srv:

            def site_nodes() -> int:
                r = httpx.get(f"{srv.url}/v1/nodes", headers=srv.headers())
                return sum(n["site"] == SITE for n in r.json()) if r.status_code == 200 else 0

            until(lambda: site_nodes() == 2, "the site's nodes in /v1/nodes", 60)
            yield kc, srv


@pytest.fixture(scope="module")
def user(plane: tuple[K8sCluster, ServerProc]) -> Iterator[httpx.Client]:
    with plane[1].tenant_client("ml") as client:
        yield client


@pytest.fixture(scope="module")
def backend() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((local_address(), 0), Backend)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    Backend.release.set()
    server.shutdown()
    server.server_close()


def get(kc: K8sCluster, path: str) -> dict[str, Any] | None:
    r = kc.api.get(path)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return dict(r.json())


def replicas_are(kc: K8sCluster, srv: ServerProc, n: int, what: str) -> None:
    def check() -> bool:
        dep = get(kc, f"{DEPLOYMENTS}/{NAME}")
        return dep is not None and dep["spec"]["replicas"] == n

    try:
        until(check, what, 60)
    except AssertionError:
        raise AssertionError(f"{get(kc, f'{DEPLOYMENTS}/{NAME}')}\n{srv.log()[-4000:]}") from None


SERVICE = {
    "name": "web",
    "port": 8000,
    "job": {
        "image": "registry.invalid/web:1",
        "command": ["serve", "--port", "8000"],
        "env": {"MODE": "test"},
        "spec": f"A100:1 site={SITE}",
    },
    "replicas": {"min": 1, "max": 3},
    "readiness": {"path": "/ready", "interval_s": 2, "timeout_s": 1, "failures": 2},
    "scaling": {"target_in_flight": 1, "window_s": 1},
}


def test_a_service_becomes_a_deployment_and_a_service_it_owns(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    kc = plane[0]
    r = user.post("/v1/services", json=SERVICE)
    assert r.status_code == 201, r.text
    dep = until(lambda: get(kc, f"{DEPLOYMENTS}/{NAME}"), "the Deployment", 60)
    labels = {"xpupool.io/service": "web", "xpupool.io/tenant": "ml", "xpupool.io/plane-site": SITE}
    assert dep["metadata"]["labels"] == labels
    assert dep["spec"]["replicas"] == 1
    template = dep["spec"]["template"]
    assert template["metadata"]["labels"]["xpupool.io/queue"] == "ml"
    (c,) = template["spec"]["containers"]
    assert (c["image"], c["command"]) == ("registry.invalid/web:1", ["serve", "--port", "8000"])
    assert {"name": "MODE", "value": "test"} in c["env"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    probe = c["readinessProbe"]
    assert probe["httpGet"]["path"] == "/ready" and probe["httpGet"]["port"] == "http"
    assert (probe["periodSeconds"], probe["timeoutSeconds"], probe["failureThreshold"]) == (2, 1, 2)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert template["spec"]["schedulerName"] == "xpupool-scheduler"
    svc = until(lambda: get(kc, f"/api/v1/namespaces/{NS}/services/{NAME}"), "the Service", 30)
    (owner,) = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Deployment",
        NAME,
        dep["metadata"]["uid"],
    )
    assert svc["spec"]["selector"] == {"xpupool.io/service": "web", "xpupool.io/tenant": "ml"}
    assert svc["spec"]["ports"][0]["port"] == 8000

    # the deployment controller made its pod (the plane made none itself)
    def pods() -> list[dict[str, Any]]:
        r = kc.api.get(
            f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": "xpupool.io/service=web"}
        )
        return list(r.json()["items"])

    (pod,) = until(pods, "the Deployment's pod", 60)
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    got = user.get("/v1/services/web").json()
    assert got["state"] == "starting" and got["replicas"] == [], got


def test_the_proxy_forwards_to_the_slices_endpoints_and_in_flight_requests_scale_it(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client, backend: ThreadingHTTPServer
) -> None:
    kc, srv = plane
    host, port = backend.server_address[0], backend.server_address[1]
    kc.create(
        SLICES,
        {
            "metadata": {
                "name": f"{NAME}-by-hand",
                "labels": {
                    "kubernetes.io/service-name": NAME,
                    "endpointslice.kubernetes.io/managed-by": "xpupool-test",
                    "xpupool.io/plane-site": SITE,
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
        },
    )

    def hello() -> str:
        r = user.get("/v1/services/web/proxy/hello")
        return r.text if r.status_code == 200 else ""

    assert until(hello, "an answer through the proxy", 60) == f"hello from {host} /hello"
    until(lambda: user.get("/v1/services/web").json()["state"] == "ready", "service ready", 30)

    answers: list[int] = []
    Backend.release.clear()

    def slow() -> None:
        with httpx.Client(base_url=str(user.base_url), headers=user.headers, timeout=90) as c:
            answers.append(c.get("/v1/services/web/proxy/slow").status_code)

    held = [threading.Thread(target=slow) for _ in range(3)]
    for t in held:
        t.start()
    try:
        replicas_are(kc, srv, 3, "3 replicas for 3 requests in flight (target 1 each)")
    finally:
        Backend.release.set()
        for t in held:
            t.join(90)
    assert answers == [200, 200, 200]
    replicas_are(kc, srv, 1, "back to 1 replica once the window passed")


def test_deleting_the_service_deletes_its_deployment_and_service(
    plane: tuple[K8sCluster, ServerProc], user: httpx.Client
) -> None:
    kc = plane[0]
    assert user.delete("/v1/services/web").status_code == 204

    def gone() -> bool:
        return (
            get(kc, f"{DEPLOYMENTS}/{NAME}") is None
            and get(kc, f"/api/v1/namespaces/{NS}/services/{NAME}") is None
        )

    until(gone, "the Deployment and the Service deleted", 60)

    def no_pods() -> bool:  # deleted by the garbage collector (no kubelet ends a bound one)
        r = kc.api.get(
            f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": "xpupool.io/service=web"}
        )
        return all(p["metadata"].get("deletionTimestamp") for p in r.json()["items"])

    until(no_pods, "the pods collected", 60)
    assert user.get("/v1/services/web/proxy/hello").status_code == 404
