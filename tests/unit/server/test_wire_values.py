"""What the API takes in and how it quotes values back (``server/wire_values.py``), and that every
request body model refuses what no process, store or encoder can hold (``schemas/base.py`` ``Incoming``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from xpupool.server.schemas.agent_protocol import Heartbeat, NodeIn
from xpupool.server.schemas.jobs import JobEvent, JobIn
from xpupool.server.schemas.queues import QueueIn
from xpupool.server.schemas.tenants import TenantIn, TenantPatch, TokenIn
from xpupool.server.wire_values import MAX_QUOTE, first_unsafe, quote, readable, shorten


@pytest.mark.parametrize(
    ("value", "path", "word"),
    [
        ("a\x00b", "", "NUL"),
        (["ok", "x\ud800"], "[1]", "surrogate"),
        ({"env": {"K": "v\x00"}}, "env.K", "NUL"),
        ({"env": {"K\udfff": "v"}}, "env", "key"),
        ({"a": [1, {"b": math.nan}]}, "a[1].b", "NaN"),
        ([math.inf], "[0]", "Infinity"),
        ((1.0, -math.inf), "[1]", "JSON number"),
    ],
)
def test_first_unsafe_names_the_path(value: object, path: str, word: str) -> None:
    found = first_unsafe(value)
    assert found is not None
    assert found[0] == path
    assert word in found[2]


@pytest.mark.parametrize(
    "value", ["plain", "naïve ☃ 😀", 1.5, 10**30, None, True, {"k": ["v", 1, 2.0]}, []]
)
def test_representable_values_pass(value: object) -> None:
    assert first_unsafe(value) is None


@pytest.mark.slow
def test_a_deeply_nested_value_does_not_exhaust_the_stack() -> None:
    value: Any = "end\x00"
    for _ in range(100_000):
        value = [value]
    found = first_unsafe(value)
    assert found is not None and found[0].count("[0]") == 100_000


def test_readable_replaces_only_what_cannot_be_encoded() -> None:
    stored = {"cmd": ["echo", "a\ud800b"], "k\udc80": "ok", "n": 1}
    shown = readable(stored)
    assert shown == {"cmd": ["echo", "a\ufffdb"], "k\ufffd": "ok", "n": 1}
    json.dumps(shown, ensure_ascii=False).encode("utf-8")  # encodable now
    clean = {"a": ["b", "é"]}
    assert readable(clean) is clean  # nothing copied when nothing needed replacing


def test_quote_keeps_short_values_and_shortens_long_ones() -> None:
    assert quote("short") == "short"
    assert quote({"a": 1}) == {"a": 1}
    assert quote(None) is None and quote(7) == 7
    long = quote("x" * 5_000_000)
    assert isinstance(long, str) and len(long) < MAX_QUOTE + 40
    assert long.endswith("[4999800 more characters]")
    listed = quote(list(range(10_000)))
    assert isinstance(listed, str) and len(listed) < MAX_QUOTE + 40
    assert quote(math.nan) == "nan"  # not a JSON number: shown as text
    assert quote(b"\x00" * 10_000).startswith("b'\\x00")  # not JSON: its repr, shortened
    assert "\ufffd" in str(quote("a\ud800"))
    assert len(shorten("r" * 1000, 500)) < 540


# ------------------------------------------------------------------------ every request model
REQUESTS: list[tuple[type[BaseModel], dict[str, Any], str]] = [
    (JobIn, {"command": ["echo", "a\x00"]}, "command"),
    (JobIn, {"env": {"A": "\ud800"}}, "env"),
    (JobIn, {"request": {"cpu": math.nan}}, "request"),
    (JobIn, {"priority": math.inf}, "priority"),
    (TenantIn, {"name": "t", "weight": math.nan}, "weight"),
    (TenantPatch, {"weight": math.inf}, "weight"),
    (TokenIn, {"name": "x\x00"}, "name"),
    (QueueIn, {"name": "q", "tenant": "t", "quotas": [{"flavor": "A\x00"}]}, "quotas"),
    (
        NodeIn,
        {"name": "n", "cpu_milli": 1, "memory_mib": 1, "labels": {"k": "\x00"}},
        "labels",
    ),
    (Heartbeat, {"node": "n", "metrics": [{"uuid": "u", "power_w": math.nan}]}, "metrics"),
    (Heartbeat, {"node": "n", "replicas": [{"reason": "\ud800"}]}, "replicas"),
]


@pytest.mark.parametrize(("model", "body", "field"), REQUESTS)
def test_every_request_body_refuses_unsafe_values(
    model: type[BaseModel], body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    errors = [e for e in caught.value.errors() if e["type"] == "unsafe_value"]
    assert errors and errors[0]["loc"][0] == field


def test_responses_still_read_what_an_older_release_stored() -> None:
    """Responses and peers' answers are read leniently: no value check there."""
    job = JobEvent.model_validate({"at": 1.0, "state": "failed", "reason": "x\ud800"})
    assert job.reason == "x\ud800"
