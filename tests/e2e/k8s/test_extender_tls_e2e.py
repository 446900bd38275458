"""The extender's client authentication, with what kube-scheduler can actually send (issue 43,
item 10): TLS client certificates. kube-scheduler's ``Extender`` configuration has
``enableHTTPS`` and ``tlsConfig`` (certFile, keyFile, caFile, ...) and no field for a bearer token
(k8s.io/kube-scheduler config/v1 types.go), so ``xpupool k8s extender --client-ca`` makes the TLS
handshake require a certificate that CA signed.

A real kube-scheduler (v1.36) configured with a client certificate places a pod through the
extender; a caller with no certificate, or one another CA signed, gets no answer at all; the
kubelet's probes, which present no certificate, find ``/healthz`` and ``/readyz`` on the metrics
port. The certificates are made here with ``openssl``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from cluster import Extender, ExtenderProcess, K8sCluster, extender_stack, free_port
from test_extender_e2e import A100, MANAGED, add_nodes, bound, create, gpu_pod, hami_node, shares

from tls_certs import Pair, client_context, make_ca, make_cert

pytestmark = pytest.mark.k8s


@dataclass
class Stack:
    kc: K8sCluster
    ext: ExtenderProcess
    ca: Pair
    client: Pair  # kube-scheduler's certificate
    stranger: Pair  # a client certificate of another CA


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("extender-tls")
    ca = make_ca(folder, "ca")
    server = make_cert(folder, ca, "server")
    client = make_cert(folder, ca, "kube-scheduler", client=True)
    stranger = make_cert(folder, make_ca(folder, "other-ca"), "stranger", client=True)
    port = free_port()
    tls = {"certFile": str(client.cert), "keyFile": str(client.key), "caFile": str(ca.cert)}
    ext = Extender(
        url_prefix=f"https://127.0.0.1:{port}", managed_resources=MANAGED, tls_config=tls
    )
    extra = ("--tls-cert", str(server.cert), "--tls-key", str(server.key))
    extra += ("--client-ca", str(ca.cert))
    client_tls = (ca.cert, client.cert, client.key)
    with extender_stack(folder, port, ext, extra, client_tls=client_tls) as (kc, proc):
        yield Stack(kc, proc, ca, client, stranger)


BIND = {"PodName": "nobody", "PodNamespace": "kube-system", "PodUID": "", "Node": "tls-a"}


def test_kube_scheduler_places_a_pod_through_the_extender_with_its_certificate(
    stack: Stack,
) -> None:
    add_nodes(stack.kc, hami_node("tls-a", A100, 1))
    create(stack.kc, gpu_pod("tls-pod", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}))
    pod = bound(stack.kc, ["tls-pod"])["tls-pod"]
    assert pod["spec"]["nodeName"] == "tls-a"
    assert shares(pod) == [("GPU-tls-a-0", 8000, 0)]


def test_a_caller_without_a_certificate_of_the_ca_gets_no_answer(stack: Stack) -> None:
    url = f"{stack.ext.url}/bind"
    for who in (None, stack.stranger):  # no certificate; one another CA signed
        client = httpx.Client(verify=client_context(stack.ca.cert, who))
        with client, pytest.raises(httpx.TransportError):
            client.post(url, json=BIND)
    with httpx.Client(verify=client_context(stack.ca.cert, stack.client)) as client:
        answer = client.post(url, json=BIND)  # answered; the pod does not exist
    assert answer.status_code == 200 and "nobody" in answer.json()["Error"]


def test_the_probes_on_the_metrics_port_need_no_certificate(stack: Stack) -> None:
    base = f"http://127.0.0.1:{stack.ext.metrics_port}"
    assert httpx.get(f"{base}/healthz").text == "ok"
    ready = httpx.get(f"{base}/readyz")
    assert (ready.status_code, ready.text) == (200, "ok")
    assert "xpupool_extender_calls_total" in httpx.get(f"{base}/metrics").text
