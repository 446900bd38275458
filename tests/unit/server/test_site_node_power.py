"""A Kubernetes site's card power samples (issue 52): the plane scrapes each node's xpupool node
agent ``/metrics`` (``k8s/site/node_power.py``) and keeps the readings as an agent heartbeat's,
so the meter's energy for a pod there follows the watts the node agent read. The node agents are
real HTTP servers on 127.0.0.1 serving the agent's own renderer (``agent/metrics.py``) over
probe readings, behind the chart's bearer token; the site is a real plane's, not attached (no
cluster), its pod seen through its watch consumer. With ``node_metrics.service`` the site is
attached to a small API server on 127.0.0.1 (``fake_apiserver.py``) whose EndpointSlice of the
agents' Service points at the node agent: the chart's agents listen on their pods' IPs, which
only the slices name (``k8s/site/agent_endpoints.py``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fake_apiserver import FakeApiServer, node_object
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from server_kit import Server
from sqlalchemy import select
from test_kubernetes_site_silence import until
from test_site_foreign_use import SITE, bound_pod, kube, seen  # noqa: F401  (kube: the fixture)

from xpupool.agent.metrics import bearer_only, device_families, serve_wsgi
from xpupool.agent.monitor import Reading
from xpupool.k8s.site.node_power import NodePower
from xpupool.k8s.site.site import KubernetesSite
from xpupool.k8s.site.sites_file import KubernetesSiteConfig, NodeMetricsConfig, parse_sites
from xpupool.model.errors import RequestError
from xpupool.probes.base import DeviceInfo
from xpupool.server.storage.usage import usage_records

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

TOKEN = "chart-metrics-token"


def card(uuid: str, watts: float, util_pct: float) -> DeviceInfo:
    """A card as the fake probe reads it."""
    return DeviceInfo(
        "nvidia",
        "NVIDIA A100-SXM4-80GB",
        uuid,
        0,
        81920,
        canonical_model="A100-SXM4-80GB",
        memory_used_mib=2048,
        utilization_pct=util_pct,
        power_watts=watts,
        temperature_c=55.0,
    )


class _Devices(Collector):
    def __init__(self, node: str, reading: Reading) -> None:
        self.node, self.reading = node, reading

    def collect(self) -> Iterable[Metric]:
        return device_families([(self.node, self.reading)])


def agent_app(node: str, reading: Reading) -> WSGIApplication:
    """A node agent's metrics app: its own renderer over ``reading``."""
    registry = CollectorRegistry()
    registry.register(_Devices(node, reading))
    return make_wsgi_app(registry)


@contextmanager
def node_agents(
    readings: dict[str, Reading], token_file: Path, answers: dict[str, bytes] | None = None
) -> Iterator[tuple[str, threading.Event]]:
    """Node agents' metrics behind one bearer token on 127.0.0.1, ``/NODE/metrics`` each: the
    agent's renderer over ``readings``, or a fixed body (``answers``), or (node ``hang``) no
    answer until the yielded event is set. Yields the URL template."""
    apps = {name: agent_app(name, reading) for name, reading in readings.items()}
    release = threading.Event()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        node = str(environ.get("PATH_INFO", "")).strip("/").split("/")[0]
        if node in apps:
            return apps[node](environ, start_response)
        if node == "hang":
            release.wait(60)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [(answers or {}).get(node, b"")]

    server = serve_wsgi(bearer_only(app, token_file), "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.port}/{{node}}/metrics", release
    finally:
        release.set()
        server.stop()


def _energy(srv: Server) -> dict[str, float]:
    with srv.plane.db.connect() as conn:
        t = usage_records
        return {r.uuid: r.energy_j for r in conn.execute(select(t.c.uuid, t.c.energy_j)).all()}


def test_a_pods_energy_follows_the_watts_its_node_agent_reads(
    kube: tuple[Server, KubernetesSite],  # noqa: F811
    tmp_path: Path,
) -> None:
    srv, site = kube
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    # a card the node does not have in the books is in the text too: ignored
    reading = Reading(
        devices=[card("GPU-k1-0", 123.0, 40.0), card("GPU-k1-1", 61.0, 0.0), card("GPU-x", 9e3, 1)]
    )
    with node_agents({"k1": reading}, token) as (url, _):
        power = NodePower(SITE, NodeMetricsConfig(url=url, token_file=token), site.owns)
        seen(site, bound_pod("train", "k1", ["GPU-k1-0"]))
        srv.plane.meter.flush(srv.plane)  # the first flush opens the window
        assert power.round(srv.plane) == 2
        assert power.failed == {}
    srv.clock.advance(100)
    srv.plane.meter.flush(srv.plane)
    assert _energy(srv) == {"GPU-k1-0": pytest.approx(123.0 * 100)}  # not the catalog's 400 W
    got = srv.plane.device_metrics("GPU-k1-0")
    assert got is not None and (got.power_w, got.utilization_pct) == (123.0, 40.0)
    assert got.memory_used_mib == 2048
    assert srv.plane.device_metrics("GPU-x") is None


def test_a_node_that_fails_keeps_no_other_nodes_readings_back(
    kube: tuple[Server, KubernetesSite],  # noqa: F811
    tmp_path: Path,
) -> None:
    srv, site = kube
    token, theirs = tmp_path / "token", tmp_path / "agents.token"  # the plane's, the agents'
    token.write_text(TOKEN)
    theirs.write_text(TOKEN)
    from hami_objects import hami_node

    from xpupool.k8s.site.site import read_node
    from xpupool.server.services import fleet

    for name in ("junk", "hang", "gone"):
        extra = read_node(hami_node(name, 1), SITE).node
        assert extra is not None
        fleet.register_many(srv.plane, [extra], source=site.source)
    answers = {"junk": b'xpupool_agent_device_power_watts{uuid="GPU-junk-0" 1e400 }}{\n'}
    readings = {"k1": Reading(devices=[card("GPU-k1-0", 200.0, 90.0)])}
    with node_agents(readings, theirs, answers) as (url, release):
        config = NodeMetricsConfig(url=url, token_file=token, timeout_s=3, in_flight=2)
        power = NodePower(SITE, config, site.owns)
        assert power.round(srv.plane) == 1  # k1's card, whatever the others did
        release.set()
        assert set(power.failed) == {"junk", "hang"}  # "gone": an empty exposition, no card
        assert "not a Prometheus exposition" in power.failed["junk"]
        assert "Timeout" in power.failed["hang"]
        token.write_text("a-token-the-agents-do-not-take")
        assert power.round(srv.plane) == 0
        assert "HTTP 401" in power.failed["k1"]
    got = srv.plane.device_metrics("GPU-k1-0")
    assert got is not None and got.power_w == 200.0
    assert srv.plane.device_metrics("GPU-junk-0") is None


@pytest.mark.parametrize(
    ("metrics", "field"),
    [
        ({"url": "ftp://{node}:9400/metrics"}, "sites[0].node_metrics.url"),
        ({"url": "http://{host}:9400/metrics"}, "sites[0].node_metrics.url"),
        ({"token_file": "missing.token"}, "sites[0].node_metrics.token_file"),
        ({"token_file": "t", "token_secret": "metrics"}, "sites[0].node_metrics"),
        ({"in_flight": 0}, "sites[0].node_metrics.in_flight"),
        ({"port": 9400}, "sites[0].node_metrics.port"),  # no service: no port of its
        ({"service": "xpupool/agents", "url": "http://{node}/m"}, "sites[0].node_metrics.service"),
        ({"service": "agents"}, "sites[0].node_metrics.service"),
        ({"service": "xpupool/Agents_1"}, "sites[0].node_metrics.service"),
        ({"service": "a/b", "port": 0}, "sites[0].node_metrics.port"),
        ({"service": "a/b", "port": "9400"}, "sites[0].node_metrics.port"),
        ({"service": "a/b", "port": "a-very-long-port-name"}, "sites[0].node_metrics.port"),
        ({"service": "a/b", "port": True}, "sites[0].node_metrics.port"),
    ],
)
def test_a_bad_node_metrics_entry_is_refused_naming_the_field(
    tmp_path: Path, metrics: dict[str, object], field: str
) -> None:
    (tmp_path / "t").write_text(TOKEN)
    data = {"sites": [{"name": "gpu-a", "in_cluster": True, "node_metrics": metrics}]}
    with pytest.raises(RequestError) as caught:
        parse_sites(data, tmp_path)
    assert caught.value.field == field


def test_a_node_metrics_entry_takes_its_token_file_from_the_sites_folder(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(TOKEN)
    data = {"sites": [{"name": "gpu-a", "in_cluster": True, "node_metrics": {"token_file": "t"}}]}
    (site,) = parse_sites(data, tmp_path)
    assert site.node_metrics is not None
    assert site.node_metrics.token_file == (tmp_path / "t").resolve()
    assert site.node_metrics.url_of("k1") == "http://k1:9400/metrics"  # the chart's port
    assert site.node_metrics.service_port() is None


def test_a_node_metrics_service_names_the_charts_port_unless_told_another() -> None:
    for given, port in (({}, "metrics"), ({"port": 9400}, 9400), ({"port": "prom"}, "prom")):
        metrics = {"service": "xpupool/xpupool-node-agent-metrics", **given}
        data = {"sites": [{"name": "gpu-a", "in_cluster": True, "node_metrics": metrics}]}
        (site,) = parse_sites(data)
        assert site.node_metrics is not None
        assert site.node_metrics.service_port() == ("xpupool", "xpupool-node-agent-metrics", port)


def agents_slice(port: int) -> dict[str, Any]:
    """The chart's agents' Service's slice: k1's agent on 127.0.0.1 ready, k2's not ready, and
    one on a node that is no node of the site."""
    endpoints = [
        {"addresses": ["127.0.0.1"], "nodeName": "k1", "conditions": {"ready": True}},
        {"addresses": ["127.0.0.2"], "nodeName": "k2", "conditions": {"ready": False}},
        {"addresses": ["127.0.0.3"], "nodeName": "elsewhere", "conditions": {"ready": True}},
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "xpupool-node-agent-metrics-x7k2p",
            "namespace": "xpupool",
            "labels": {"kubernetes.io/service-name": "xpupool-node-agent-metrics"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints,
    }


@pytest.mark.slow  # a site's threads against an API server and a node agent: seconds
def test_a_sites_node_agents_are_found_through_their_services_endpoint_slices(
    server: Server, tmp_path: Path
) -> None:
    plane = server.plane
    token = tmp_path / "token"
    token.write_text(TOKEN)
    reading = Reading(devices=[card("GPU-k1-0", 123.0, 40.0), card("GPU-k1-1", 61.0, 0.0)])
    agent = serve_wsgi(bearer_only(agent_app("k1", reading), token), "127.0.0.1", 0)
    api = FakeApiServer(tokens={"t"}).__enter__()
    site: KubernetesSite | None = None
    try:
        api.add_node(node_object("k1", 2))
        api.add_node(node_object("k2", 2))
        api.add_slice(agents_slice(agent.port))
        kubeconfig = tmp_path / "kc.json"
        kubeconfig.write_text(api.kubeconfig("t"))
        metrics = NodeMetricsConfig(
            service="xpupool/xpupool-node-agent-metrics", token_file=token, every_s=1
        )
        config = KubernetesSiteConfig(name=SITE, kubeconfig=kubeconfig, node_metrics=metrics)
        site = KubernetesSite(config, resync_s=0)
        plane.sites.add(site)
        site.attach(plane)
        power = site.node_power
        assert power is not None
        until(lambda: plane.node("k1") is not None and plane.node("k2") is not None, "nodes")
        seen(site, bound_pod("train", "k1", ["GPU-k1-0"]))
        plane.meter.flush(plane)  # the first flush opens the window
        until(lambda: plane.device_metrics("GPU-k1-0") is not None, "k1's agent scraped")
        rounds = power.rounds
        until(lambda: power.rounds > rounds + 1, "a whole round after it")
        assert power.failed == {}  # k2: no ready agent, skipped; "elsewhere": never asked
        server.clock.advance(100)
        plane.meter.flush(plane)
        assert _energy(server) == {"GPU-k1-0": pytest.approx(123.0 * 100)}
        got = plane.device_metrics("GPU-k1-0")
        assert got is not None and (got.power_w, got.utilization_pct) == (123.0, 40.0)
        assert plane.device_metrics("GPU-k2-0") is None
        # the slice changed (k1's agent no longer ready, k2's ready): the watch says so
        changed = agents_slice(agent.port)
        changed["endpoints"][0]["conditions"]["ready"] = False
        changed["endpoints"][1]["conditions"]["ready"] = True
        api.add_slice(changed)
        endpoints = power.endpoints
        assert endpoints is not None
        until(lambda: set(endpoints.urls()) == {"k2", "elsewhere"}, "the slice's change")
    finally:
        if site is not None:
            site.detach()
        api.stop()
        agent.stop()
