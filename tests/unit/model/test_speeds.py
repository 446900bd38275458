"""A job's declared speeds: both forms read alike, the compact form round-trips, bad input is
refused at its path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xpupool.model import Request
from xpupool.model.errors import RequestError
from xpupool.model.request_model import request_from_dict, request_to_dict
from xpupool.model.spec import format_spec, parse_spec
from xpupool.model.speeds import parse_speeds


def test_text_and_object_forms_agree() -> None:
    text = request_from_dict("A100 kind=resnet50 speed=A100:1.0,910B3:0.7")
    obj = request_from_dict(
        {"devices": {"models": ["A100"]}, "kind": "resnet50", "speed": {"A100": 1, "910B3": 0.7}}
    )
    assert text == obj
    assert text.speeds == (("A100", 1.0), ("910B3", 0.7))
    assert text.kind == "resnet50"


def test_round_trips() -> None:
    req = parse_spec("any kind=lm speed=V100:3.25,K80:1")
    assert parse_spec(format_spec(req)) == req
    assert request_from_dict(request_to_dict(req)) == req
    assert request_to_dict(req)["speed"] == "V100:3.25,K80:1"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("A100:0", "speed.A100"),
        ("A100:-1", "speed.A100"),
        ("A100:nan", "speed.A100"),
        ("A100:x", "speed.A100"),
        ("A100", "speed[0]"),
        ("A100:1,a100:2", "speed.a100"),
    ],
)
def test_bad_speeds_name_the_model(value: str, field: str) -> None:
    with pytest.raises(RequestError) as exc:
        parse_speeds("speed", value)
    assert exc.value.field == field


def test_bad_kind_is_refused_at_its_field() -> None:
    with pytest.raises(RequestError) as exc:
        request_from_dict({"kind": "two words"})
    assert exc.value.field == "kind"


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.-]{0,8}", fullmatch=True),
            st.floats(1e-9, 1e9, allow_nan=False, allow_infinity=False),
        ),
        max_size=4,
        unique_by=lambda pair: pair[0].upper(),
    ),
    st.none() | st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,12}", fullmatch=True),
)
def test_any_speeds_round_trip_through_both_forms(
    pairs: list[tuple[str, float]], kind: str | None
) -> None:
    req = Request(devices=parse_spec("any").devices, kind=kind, speeds=tuple(pairs))
    assert parse_spec(format_spec(req)) == req
    assert request_from_dict(request_to_dict(req)) == req
