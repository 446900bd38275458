"""The sites file's links and datasets (issue 51 part 2) and the request's ``data`` key: read
strictly, every error naming the path in the file or the request."""

from __future__ import annotations

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.request_model import RequestModel
from xpupool.model.site_network import parse_network
from xpupool.model.spec import format_spec, parse_spec

GOOD = {
    "links": [{"sites": ["beijing", "shanghai"], "bandwidth_gbps": 25, "latency_ms": 30}],
    "datasets": {"imagenet": {"size": "150Gi", "sites": ["beijing"]}},
}


def test_links_and_datasets_are_read() -> None:
    net = parse_network({**GOOD, "sites": []})  # the file's other keys are its own
    assert net.links[0].latency_ms == 30
    assert net.datasets["imagenet"].size_mib == 150 * 1024
    assert net.bandwidth_gbps("shanghai", "beijing") == 25
    assert parse_network(None).datasets == {}


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"links": [{"sites": ["a", "a"], "bandwidth_gbps": 1}]}, "links[0].sites", "itself"),
        ({"links": [{"sites": ["a", "b"], "bandwidth_gbps": 0}]}, "links[0].bandwidth_gbps", "0"),
        ({"links": [{"sites": ["a", "b"], "gbps": 1}]}, "links[0].bandwidth_gbps", "required"),
        ({"links": [{"sites": ["a b", "c"], "bandwidth_gbps": 1}]}, "links[0].sites", "site"),
        (
            {"links": [{"sites": ["a", "b"], "bandwidth_gbps": 1}] * 2},
            "links[1].sites",
            "given twice",
        ),
        ({"datasets": {"x": {"size": "1Qi", "sites": ["a"]}}}, "datasets.x.size", "unit"),
        ({"datasets": {"x": {"size": "0Gi", "sites": ["a"]}}}, "datasets.x.size", "more than 0"),
        ({"datasets": {"x": {"size": "1Gi", "sites": []}}}, "datasets.x.sites", "at least 1"),
        ({"datasets": {"x": {"size": "1Gi", "sites": ["a", "a"]}}}, "datasets.x.sites", "twice"),
        ({"datasets": {"x y": {"size": "1Gi", "sites": ["a"]}}}, "datasets.x y", "dataset"),
    ],
)
def test_a_bad_network_is_refused_naming_the_field(data: object, field: str, reason: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_network(data)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_data_is_a_request_key_in_both_forms() -> None:
    req = parse_spec("T4 data=imagenet")
    assert req.data == "imagenet"
    assert format_spec(req) == "T4 data=imagenet"
    assert RequestModel.model_validate({"data": "imagenet"}).to_request().data == "imagenet"
    assert RequestModel.from_request(req).dump()["data"] == "imagenet"
    with pytest.raises(RequestError) as caught:
        parse_spec("T4 data=a,b")
    assert caught.value.field == "data"


def test_sites_any_lets_a_gang_span_sites() -> None:
    assert parse_spec("T4 replicas=3 gang sites=any").span_sites
    with pytest.raises(RequestError) as caught:
        parse_spec("T4 sites=beijing")
    assert caught.value.field == "span_sites"
    with pytest.raises(RequestError):
        parse_spec("T4 span-sites sites=any")  # given twice
