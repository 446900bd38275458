"""Where the plane finds each node's xpupool node agent with ``node_metrics.service`` (issue 52,
``k8s/site/agent_endpoints.py``): the agents' Service's EndpointSlices read by the services'
reader (``endpoint_slices.read_slice``) into its book, by node. A ready endpoint naming its node
is that node's agent (IPv6 bracketed in the URL); a not-ready, terminating or node-less one is
none; a slice naming a node in no node name's form is dropped whole, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.agent_endpoints import AgentEndpoints, metrics_url
from xpupool.k8s.site.endpoint_slices import read_slice
from xpupool.model.errors import RequestError

NS, SERVICE = "xpupool", "xpupool-node-agent-metrics"


def agent_slice(
    name: str, endpoints: list[dict[str, Any]], *, kind: str = "IPv4", service: str = SERVICE
) -> dict[str, Any]:
    """The agents' Service's slice as the endpointslice controller writes it for the chart's
    DaemonSet: the Service's port named ``metrics``, targeting the pods' 9400."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": kind,
        "ports": [{"name": "metrics", "port": 9400, "protocol": "TCP"}],
        "endpoints": endpoints,
    }


def endpoint(node: str | None, address: str, **conditions: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"addresses": [address], "conditions": conditions}
    if node is not None:
        out["nodeName"] = node
    return out


def fed(agents: AgentEndpoints, *slices: dict[str, Any]) -> AgentEndpoints:
    """``agents`` with ``slices`` delivered as the informer delivers them (read by its reader)."""
    for obj in slices:
        value = read_slice(obj, agents.port)
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        agents.book.on_event(Event(EventType.ADDED, key, key, value))
    return agents


def test_each_nodes_ready_agent_is_its_url_and_the_others_are_none() -> None:
    agents = fed(
        AgentEndpoints("gpu-a", NS, SERVICE, "metrics"),
        agent_slice(
            "a",
            [
                endpoint("k1", "10.0.0.1", ready=True),
                endpoint("k2", "10.0.0.2", ready=False),  # not ready: no agent to ask
                endpoint("k3", "10.0.0.3", ready=True, terminating=True),
                endpoint(None, "10.0.0.4"),  # no node named: nobody's
                endpoint("k5", "10.0.0.5"),  # no ready condition: ready, as the API says
            ],
        ),
        agent_slice("b", [endpoint("k6", "fd00::6")], kind="IPv6"),
        # another Service's slice in the book: not the agents'
        agent_slice("c", [endpoint("k7", "10.0.0.7")], service="other"),
    )
    assert agents.urls() == {
        "k1": "http://10.0.0.1:9400/metrics",
        "k5": "http://10.0.0.5:9400/metrics",
        "k6": "http://[fd00::6]:9400/metrics",
    }


def test_a_node_with_two_ready_agents_gets_one_and_a_deleted_slice_takes_its_agents() -> None:
    agents = fed(
        AgentEndpoints("gpu-a", NS, SERVICE, 9400),
        agent_slice("a", [endpoint("k1", "10.0.0.9")]),
        agent_slice("b", [endpoint("k1", "10.0.0.1"), endpoint("k2", "10.0.0.2")]),
    )
    assert agents.urls() == {  # the first in order, whichever slice it is in
        "k1": "http://10.0.0.1:9400/metrics",
        "k2": "http://10.0.0.2:9400/metrics",
    }
    gone = read_slice(agent_slice("b", []), 9400)
    agents.book.on_event(Event(EventType.DELETED, f"{NS}/b", "b", gone))
    assert agents.urls() == {"k1": "http://10.0.0.9:9400/metrics"}


@pytest.mark.parametrize(
    ("port", "expected"),
    [("metrics", {"k1": 9400}), (9400, {"k1": 9400}), (9500, {}), ("other", {"k1": 9400})],
)
def test_the_port_is_the_one_named_or_numbered(port: str | int, expected: dict[str, int]) -> None:
    """A number must be the slice's; a name not found falls back to a slice's only port (the
    services' rule: a one-port Service's slice may name it ``""``)."""
    got = read_slice(agent_slice("a", [endpoint("k1", "10.0.0.1")]), port)
    assert {node: p for node, _, p in got.nodes} == expected


def test_of_two_ports_the_named_one_is_taken() -> None:
    obj = agent_slice("a", [endpoint("k1", "10.0.0.1")])
    obj["ports"] = [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9400}]
    assert read_slice(obj, "metrics").nodes == (("k1", "10.0.0.1", 9400),)
    assert read_slice(obj, "none").nodes == ()  # two ports, neither named so: no agent


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (endpoint("K1_NOT/A-NODE", "10.0.0.1"), "endpoints[0].nodeName"),
        ({"addresses": ["10.0.0.1"], "nodeName": 7}, "endpoints[0].nodeName"),
        (endpoint("k1", "fd00::1"), "endpoints[0].addresses[0]"),  # an IPv6 address in IPv4
        (endpoint("k1", "http://evil/"), "endpoints[0].addresses[0]"),
    ],
)
def test_a_hostile_slice_is_refused_naming_the_field(bad: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as caught:
        read_slice(agent_slice("a", [bad]), "metrics")
    assert caught.value.field == field


def test_an_ipv6_agent_is_bracketed() -> None:
    assert metrics_url("fd00::1", 9400) == "http://[fd00::1]:9400/metrics"
    assert metrics_url("10.1.2.3", 9400) == "http://10.1.2.3:9400/metrics"
