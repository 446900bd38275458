"""Version strings as vendor tools print them: ordering, equality, operators."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xpupool.model.errors import RequestError
from xpupool.model.version import OPERATORS, Version, compare, parse_version


def v(text: str) -> Version:
    return parse_version(text)


def test_cann_release_candidates_sort_before_the_release() -> None:
    assert v("8.0.RC1") < v("8.0.RC3") < v("8.0.0")
    assert v("8.0.RC1") < v("8.0")
    assert v("8.0.RC3") > v("7.0.0")


def test_nvidia_driver_versions_compare_numerically() -> None:
    assert v("550.54.15") > v("535.104.05")
    assert v("535.104.05") > v("535.54.03")
    assert v("535.104.05") == v("535.104.5")


def test_missing_components_are_zero() -> None:
    assert v("12.4") == v("12.4.0")
    assert hash(v("12.4")) == hash(v("12.4.0"))
    assert v("12") == v("12.0.0")
    assert v("12.4") < v("12.4.1")


def test_pre_release_words_rank_alpha_beta_rc() -> None:
    assert v("1.0.alpha1") < v("1.0.beta1") < v("1.0.rc1") < v("1.0")
    assert v("24.1.rc2") < v("24.1.0")
    assert v("24.1.RC2") == v("24.1.rc2")


def test_text_and_release_are_kept() -> None:
    version = v(" 8.0.RC1 ")
    assert str(version) == "8.0.RC1"
    assert version.release(2) == (8, 0)
    assert v("12").release(3) == (12, 0, 0)


@pytest.mark.parametrize(
    ("left", "op", "right", "expected"),
    [
        ("12.4", ">=", "12.4", True),
        ("12.3", ">=", "12.4", False),
        ("12.4", "<=", "12.4.0", True),
        ("12.4", "==", "12.4.0", True),
        ("12.4", "!=", "12.4.0", False),
        ("12.5", ">", "12.4", True),
        ("12.4", "<", "12.4", False),
        ("8.0.RC2", ">=", "8.0.RC1", True),
        ("8.0.RC1", ">=", "8.0.0", False),
        # ~= is the same release series, as in PEP 440
        ("12.6", "~=", "12.4", True),
        ("12.4", "~=", "12.4", True),
        ("12.3", "~=", "12.4", False),
        ("13.0", "~=", "12.4", False),
        ("12.4.5", "~=", "12.4.1", True),
        ("12.5.0", "~=", "12.4.1", False),
        ("2.5", "~=", "2", True),
        ("3.0", "~=", "2", False),
        ("8.0.RC2", "~=", "8.0.RC1", True),
        ("9.0.0", "~=", "8.0.RC1", False),
    ],
)
def test_compare(left: str, op: str, right: str, expected: bool) -> None:
    assert compare(v(left), op, v(right)) is expected


def test_compare_rejects_unknown_operator() -> None:
    with pytest.raises(ValueError, match="unknown operator"):
        compare(v("1"), "=>", v("1"))


@pytest.mark.parametrize("text", ["", "abc", "v12.4", "12.4x", "12.4.beta-ish", "   "])
def test_parse_version_bad(text: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_version(text, "devices.software[0]")
    assert info.value.field == "devices.software[0]"
    assert info.value.value == text


def test_parse_version_rejects_non_strings() -> None:
    with pytest.raises(RequestError) as info:
        parse_version(12.4, "version")  # type: ignore[arg-type]
    assert info.value.field == "version"


_parts = st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4)
_tags = st.sampled_from(["", ".RC1", ".RC3", ".alpha2", ".beta1"])


@given(_parts, _tags, _parts, _tags)
@pytest.mark.slow
def test_order_is_total_and_consistent_with_equality(
    a: list[int], tag_a: str, b: list[int], tag_b: str
) -> None:
    left = v(".".join(map(str, a)) + tag_a)
    right = v(".".join(map(str, b)) + tag_b)
    assert sum([left < right, left == right, left > right]) == 1
    if left == right:
        assert hash(left) == hash(right)
    for op in OPERATORS:
        if op != "~=":
            assert compare(left, op, right) == compare(right, _mirror(op), left)


def _mirror(op: str) -> str:
    return {">=": "<=", "<=": ">=", ">": "<", "<": ">", "==": "==", "!=": "!="}[op]


@given(_parts)
def test_trailing_zeros_do_not_matter(parts: list[int]) -> None:
    text = ".".join(map(str, parts))
    assert v(text) == v(text + ".0.0")
    assert hash(v(text)) == hash(v(text + ".0"))
