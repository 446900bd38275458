"""Elastic replicas (issue 54 part 1): ``replicas=2..8`` and ``{"min": 2, "max": 8}`` read to the
same engine request, write back canonically, and every refusal names ``replicas``."""

from __future__ import annotations

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.request import MAX_REPLICAS, Request
from xpupool.model.request_model import request_from_dict, request_to_dict
from xpupool.model.spec import format_spec, parse_spec


@pytest.mark.parametrize(
    "form",
    [
        "A100 replicas=2..8",
        {"devices": {"models": ["A100"]}, "replicas": {"min": 2, "max": 8}},
        {"devices": {"models": ["A100"]}, "replicas": "2..8"},
    ],
)
def test_both_forms_read_to_one_elastic_request(form: object) -> None:
    req = request_from_dict(form)
    assert (req.replicas, req.max_replicas) == (2, 8)
    assert request_to_dict(req)["replicas"] == {"min": 2, "max": 8}
    assert format_spec(req) == "A100 replicas=2..8"
    assert request_from_dict(request_to_dict(req)) == req
    assert parse_spec(format_spec(req)) == req


def test_a_range_of_one_size_is_that_fixed_size() -> None:
    req = request_from_dict({"replicas": {"min": 3, "max": 3}})
    assert (req.replicas, req.max_replicas) == (3, None)
    assert request_to_dict(req) == {"replicas": 3}
    assert Request(replicas=3, max_replicas=3) == Request(replicas=3)


def test_a_gang_with_a_range_is_kept_its_minimum_is_the_gang() -> None:
    req = request_from_dict("A100 replicas=2..4 gang")
    assert (req.replicas, req.max_replicas, req.gang) == (2, 4, True)
    assert format_spec(req) == "A100 replicas=2..4 gang"


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ("A100 replicas=4..2", "replicas.max"),
        ("A100 replicas=0..2", "replicas"),
        ("A100 replicas=2..x", "replicas.max"),
        (f"A100 replicas=1..{MAX_REPLICAS + 1}", "replicas.max"),
        ({"replicas": {"min": 3, "max": 2}}, "replicas.max"),
        ({"replicas": {"min": 3}}, "replicas.max"),
        ({"replicas": {"max": 3}}, "replicas.min"),
        ({"replicas": {"min": 0, "max": 2}}, "replicas.min"),
        ({"replicas": {"min": 1, "max": "2"}}, "replicas.max"),
        ({"replicas": {"min": True, "max": 2}}, "replicas.min"),
        ({"replicas": {"min": 1, "max": 2, "step": 1}}, "replicas.step"),
        ({"replicas": "2-3"}, "replicas"),
        ({"replicas": "..3"}, "replicas"),
        ({"replicas": [2, 3]}, "replicas"),
    ],
)
def test_refusals_name_replicas(form: object, field: str) -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict(form)
    assert info.value.field == field


def test_the_engine_record_checks_its_bounds() -> None:
    with pytest.raises(RequestError) as info:
        Request(replicas=4, max_replicas=2)
    assert info.value.field == "replicas.max"
