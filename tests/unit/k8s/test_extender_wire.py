"""The extender wire format against fixtures written from kube-scheduler v0.36.3's types.go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from xpupool.k8s.extender.wire import (
    MAX_BODY_BYTES,
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    HostPriorityList,
    MetaPod,
    MetaVictims,
    WireError,
    decode,
    encode,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "k8s" / "extender"

CASES: list[tuple[str, type[BaseModel]]] = [
    ("filter_args.json", ExtenderArgs),
    ("filter_args_nodes.json", ExtenderArgs),
    ("filter_result.json", ExtenderFilterResult),
    ("filter_result_error.json", ExtenderFilterResult),
    ("prioritize_args.json", ExtenderArgs),
    ("prioritize_result.json", HostPriorityList),
    ("prioritize_result_nil.json", HostPriorityList),
    ("bind_args.json", ExtenderBindingArgs),
    ("bind_result.json", ExtenderBindingResult),
    ("bind_result_error.json", ExtenderBindingResult),
    ("preempt_args.json", ExtenderPreemptionArgs),
    ("preempt_args_victims.json", ExtenderPreemptionArgs),
    ("preempt_result.json", ExtenderPreemptionResult),
]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_fixture_round_trips_byte_for_byte(name: str, kind: type[BaseModel]) -> None:
    raw = (FIXTURES / name).read_bytes()
    message = decode(kind, raw)
    # json.NewEncoder ends each body with a newline; the rest is Go's bytes exactly.
    assert encode(message) + b"\n" == raw
    canonical = json.dumps(json.loads(raw), sort_keys=True)
    assert json.dumps(json.loads(encode(message)), sort_keys=True) == canonical


def test_filter_args_fields() -> None:
    args = decode(ExtenderArgs, (FIXTURES / "filter_args.json").read_bytes())
    assert args.nodes is None
    assert args.node_names == ["gpu-1", "gpu-2", "npu-1"]
    assert args.pod is not None
    assert args.pod["metadata"]["name"] == "train-0"


def test_every_field_is_present_and_nil_is_null() -> None:
    """No omitempty anywhere in types.go: an empty result still names every field."""
    assert json.loads(encode(ExtenderFilterResult())) == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    assert json.loads(encode(ExtenderBindingResult())) == {"Error": ""}
    assert json.loads(encode(ExtenderPreemptionResult())) == {"NodeNameToMetaVictims": None}
    assert json.loads(encode(MetaVictims())) == {"Pods": None, "NumPDBViolations": 0}
    assert encode(HostPriorityList(None)) == b"null"
    # An empty, non-nil slice is [] in Go, not null.
    assert json.loads(encode(ExtenderFilterResult(node_names=[])))["NodeNames"] == []


def test_map_keys_are_sorted_as_go_sorts_them() -> None:
    result = ExtenderFilterResult(failed_nodes={"z": "a", "b": "c", "m": "d"})
    assert (
        encode(result).index(b'"b"') < encode(result).index(b'"m"') < encode(result).index(b'"z"')
    )


def test_go_html_escaping() -> None:
    body = encode(ExtenderBindingResult(error="a<b>&c\u2028"))
    assert body == b'{"Error":"a\\u003cb\\u003e\\u0026c\\u2028"}'
    assert decode(ExtenderBindingResult, body).error == "a<b>&c\u2028"


def test_keys_read_case_insensitively_unknown_ignored_null_string_is_empty() -> None:
    """Go's decoder: exact key first, then case-insensitive; unknown keys dropped; null into a
    string leaves it empty."""
    args = decode(ExtenderBindingArgs, b'{"podname":"p","PODNAMESPACE":"ns","Node":null,"X":1}')
    assert (args.pod_name, args.pod_namespace, args.node, args.pod_uid) == ("p", "ns", "", "")
    exact = decode(ExtenderBindingArgs, b'{"PodName":"exact","podname":"folded"}')
    assert exact.pod_name == "exact"


def test_score_bounds() -> None:
    assert MAX_EXTENDER_PRIORITY == 10
    ok = decode(HostPriorityList, b'[{"Host":"a","Score":10},{"Host":"b","Score":0}]')
    assert ok.root is not None
    assert [p.score for p in ok.root] == [10, 0]
    for bad in (b"11", b"-1", b"1.5", b'"3"', b"true"):
        with pytest.raises(WireError) as exc:
            decode(HostPriorityList, b'[{"Host":"a","Score":' + bad + b"}]")
        assert exc.value.field == "HostPriorityList[0].Score"
    with pytest.raises(ValueError, match="less than or equal to 10"):
        HostPriority(host="a", score=11)


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        (ExtenderArgs, b'{"NodeNames":["a",7]}', "ExtenderArgs.NodeNames[1]"),
        (ExtenderArgs, b'{"Pod":"not an object"}', "ExtenderArgs.Pod"),
        (ExtenderArgs, b'{"NodeNames":"a"}', "ExtenderArgs.NodeNames"),
        (ExtenderArgs, b"[]", "ExtenderArgs"),
        (ExtenderArgs, b"{", "ExtenderArgs"),
        (ExtenderArgs, b"\xff\xfe", "ExtenderArgs"),
        (ExtenderBindingArgs, b'{"PodUID":5}', "ExtenderBindingArgs.PodUID"),
        (ExtenderFilterResult, b'{"FailedNodes":{"a":1}}', "ExtenderFilterResult.FailedNodes.a"),
        (
            ExtenderPreemptionArgs,
            b'{"NodeNameToMetaVictims":{"n":{"NumPDBViolations":"x"}}}',
            "ExtenderPreemptionArgs.NodeNameToMetaVictims.n.NumPDBViolations",
        ),
        (MetaPod, b'{"UID":[]}', "MetaPod.UID"),
    ],
)
def test_invalid_bodies_name_the_field(kind: type[BaseModel], body: bytes, field: str) -> None:
    with pytest.raises(WireError) as exc:
        decode(kind, body)
    assert exc.value.field == field


def test_hostile_bodies() -> None:
    with pytest.raises(WireError, match="larger than"):
        decode(ExtenderArgs, b" " * (MAX_BODY_BYTES + 1))
    with pytest.raises(WireError, match="not valid JSON"):
        decode(ExtenderArgs, b'{"Pod":' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    with pytest.raises(WireError) as exc:
        decode(ExtenderArgs, b'{"NodeNames":["' + b"n" * 300 + b'"]}')
    assert exc.value.field == "ExtenderArgs.NodeNames[0]"
