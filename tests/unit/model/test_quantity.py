"""Quantities users write: memory, CPU, shares of a device, and card sizes (binary units)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xpupool.model.errors import RequestError
from xpupool.model.quantity import (
    format_card_mib,
    format_cpu_milli,
    format_mib,
    format_mib_exact,
    format_permille,
    parse_card_mib,
    parse_card_range,
    parse_cpu_milli,
    parse_device_memory,
    parse_memory_mib,
    parse_percent_permille,
)


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("24Gi", 24576),
        ("24G", 24576),  # one rule for every size: G, GB, Gi and GiB all mean GiB
        ("24GB", 24576),
        ("24GiB", 24576),
        ("512", 512),  # a bare number is MiB
        (512, 512),
        (1.5, 2),  # rounded up, never shrunk
        ("1.5Gi", 1536),
        ("1Ti", 1024 * 1024),
        ("1T", 1024 * 1024),
        ("1TB", 1024 * 1024),
        ("100M", 100),
        ("100MB", 100),
        ("1K", 1),
        ("1Ki", 1),
        ("0", 0),
        (" 8Gi ", 8192),
        ("8 Gi", 8192),
        ("8gi", 8192),
    ],
)
def test_parse_memory_mib_good(text: object, mib: int) -> None:
    assert parse_memory_mib("memory", text) == mib


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("24Gx", "unknown memory unit 'Gx'"),
        ("24m", "unknown memory unit 'm'"),  # milli-bytes: never meant
        ("-1Gi", "must not be negative"),
        (-5, "must not be negative"),
        (True, "not a boolean"),
        (None, "expected a quantity"),
        ([], "expected a quantity"),
        ("abc", "not a quantity"),
        ("", "not a quantity"),
        ("1e3", "not a quantity"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
    ],
)
def test_parse_memory_mib_bad(text: object, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_memory_mib("devices.memory", text)
    assert info.value.field == "devices.memory"
    assert info.value.value == text or text != text  # nan != nan
    assert reason_part in info.value.reason


def test_memory_error_message_is_field_reason_and_quoted_value() -> None:
    with pytest.raises(RequestError) as info:
        parse_memory_mib("devices.memory", "24Gx")
    assert str(info.value) == (
        "devices.memory: unknown memory unit 'Gx'; use Mi, Gi or Ti (M, MB, G, GB, T and TB mean "
        "the same); expected '16Gi' or '512Mi' (got '24Gx')"
    )


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("4", 4000),
        ("500m", 500),
        (2, 2000),
        (1.5, 1500),
        ("0.5", 500),
        ("0", 0),
        ("0.001", 1),
        ("2500m", 2500),
    ],
)
def test_parse_cpu_milli_good(text: object, milli: int) -> None:
    assert parse_cpu_milli("cpu", text) == milli


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("0.0005", "finer than one millicore"),
        ("1.5m", "whole number"),
        ("2M", "unknown CPU unit 'M'"),
        ("2cores", "unknown CPU unit"),
        ("-1", "must not be negative"),
        (True, "not a boolean"),
        ("x", "not a quantity"),
    ],
)
def test_parse_cpu_milli_bad(text: object, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_cpu_milli("cpu", text)
    assert info.value.field == "cpu"
    assert reason_part in info.value.reason


@pytest.mark.parametrize(
    ("text", "permille"),
    [
        ("50%", 500),
        ("12.5%", 125),
        ("100%", 1000),
        ("0.1%", 1),
        (50, 500),
        (12.5, 125),
        (" 5% ", 50),
    ],
)
def test_parse_percent_permille_good(text: object, permille: int) -> None:
    assert parse_percent_permille("devices.cores", text) == permille


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("0%", "more than 0%"),
        ("101%", "at most 100%"),
        ("0.05%", "finer than 0.1%"),
        ("50", "expected a percentage"),  # a string needs the % sign
        ("50%%", "expected a percentage"),
        ("-5%", "must not be negative"),
        ("abc%", "not a quantity"),
        (True, "expected a percentage"),
        (None, "expected a percentage"),
    ],
)
def test_parse_percent_permille_bad(text: object, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_percent_permille("devices.cores", text)
    assert info.value.field == "devices.cores"
    assert reason_part in info.value.reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("40Gi", (40960, None)),
        ("40G", (40960, None)),
        (1024, (1024, None)),
        ("50%", (None, 500)),
        ("12.5%", (None, 125)),
    ],
)
def test_parse_device_memory_good(text: object, expected: tuple[int | None, int | None]) -> None:
    assert parse_device_memory("devices.memory", text) == expected


@pytest.mark.parametrize("text", ["0", 0, "0%", "24Gx", "150%", None])
def test_parse_device_memory_bad(text: object) -> None:
    with pytest.raises(RequestError) as info:
        parse_device_memory("devices.memory", text)
    assert info.value.field == "devices.memory"


@pytest.mark.parametrize(
    "text", ["80GB", "80G", "80Gi", "80GiB", "80gb", "80 GB", "0.078125TB", "81920MB", "81920M"]
)
def test_card_sizes_are_binary_in_every_spelling(text: str) -> None:
    assert parse_card_mib("devices.card_memory", text) == 81920


@pytest.mark.parametrize(
    ("text", "mib"), [("1TB", 1024 * 1024), ("512MB", 512), ("1.5GB", 1536), ("24GB", 24576)]
)
def test_parse_card_mib_good(text: str, mib: int) -> None:
    assert parse_card_mib("devices.card_memory", text) == mib


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("80", "needs a unit"),
        (80, "needs a unit"),
        (80.0, "needs a unit"),
        ("80K", "unknown card size unit 'K'"),
        ("80m", "unknown card size unit 'm'"),
        ("80Gx", "unknown card size unit 'Gx'"),
        ("0GB", "more than 0"),
        ("-1GB", "must not be negative"),
        ("99999999999TB", "larger than any card"),
        (None, "expected a quantity"),
        (True, "not a boolean"),
    ],
)
def test_parse_card_mib_bad(text: object, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_card_mib("devices.card_memory.min", text)
    assert info.value.field == "devices.card_memory.min"
    assert reason_part in info.value.reason


@pytest.mark.parametrize(
    ("text", "bounds"),
    [
        ("80GB", (81920, 81920)),  # a single value means exactly that size, as in dstack
        ("24GB..40GB", (24576, 40960)),
        ("48GB..", (49152, None)),
        ("..40GB", (None, 40960)),
        ("40GB..40GB", (40960, 40960)),
    ],
)
def test_parse_card_range_good(text: str, bounds: tuple[int | None, int | None]) -> None:
    assert parse_card_range("devices.card_memory", text) == bounds


@pytest.mark.parametrize(
    ("text", "field", "reason_part"),
    [
        ("..", "devices.card_memory", "empty range"),
        ("40GB..24GB", "devices.card_memory", "lower bound is larger"),
        ("1GB..2GB..3GB", "devices.card_memory", "one '..'"),
        ("24..40GB", "devices.card_memory.min", "needs a unit"),
        ("24GB..40", "devices.card_memory.max", "needs a unit"),
    ],
)
def test_parse_card_range_bad(text: str, field: str, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_card_range("devices.card_memory", text)
    assert info.value.field == field
    assert reason_part in info.value.reason


@pytest.mark.parametrize(
    ("mib", "text"),
    [(81920, "80Gi"), (1500, "1500Mi"), (0, "0Mi"), (1024, "1Gi"), (1023, "1023Mi")],
)
def test_format_mib_exact(mib: int, text: str) -> None:
    assert format_mib_exact(mib) == text


def test_format_mib_is_for_display_and_may_round() -> None:
    assert format_mib(1500) == "1.5Gi"
    assert format_mib(81920) == "80Gi"


@pytest.mark.parametrize(("milli", "text"), [(4000, "4"), (1500, "1500m"), (0, "0"), (1, "1m")])
def test_format_cpu_milli(milli: int, text: str) -> None:
    assert format_cpu_milli(milli) == text


@pytest.mark.parametrize(("mib", "text"), [(81920, "80GB"), (1536, "1536MB"), (1, "1MB")])
def test_format_card_mib(mib: int, text: str) -> None:
    assert format_card_mib(mib) == text


@given(st.integers(min_value=0, max_value=1 << 50))
@pytest.mark.slow
def test_memory_format_round_trips(mib: int) -> None:
    assert parse_memory_mib("memory", format_mib_exact(mib)) == mib


@given(st.integers(min_value=0, max_value=1 << 40))
def test_cpu_format_round_trips(milli: int) -> None:
    assert parse_cpu_milli("cpu", format_cpu_milli(milli)) == milli


@given(st.integers(min_value=1, max_value=1000))
def test_permille_format_round_trips(permille: int) -> None:
    assert parse_percent_permille("devices.cores", format_permille(permille)) == permille


@given(st.integers(min_value=1, max_value=1 << 40))
def test_card_format_round_trips(mib: int) -> None:
    assert parse_card_mib("devices.card_memory", format_card_mib(mib)) == mib
