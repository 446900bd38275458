"""Parse the quantities users write: memory (MiB), CPU (millicores), shares of a device.

One rule for every size in a request (host memory, device memory, card size) and in a cluster
file: units are binary, because accelerator memory is marketed in binary units (an "80GB" A100 has
80 GiB), so ``K``/``KB``/``Ki``/``KiB`` mean 2^10 bytes, ``M*`` 2^20, ``G*`` 2^30 and ``T*`` 2^40,
case-insensitively, and ``A100:80GB mem=80GB`` asks for the whole card. A bare number is MiB (the
unit the engine keeps). Results are whole MiB,
rounded up so that a request is never silently shrunk. Shares of one device are kept in thousandths
(``permille``) so that ``12.5%`` is exact; the engine never handles floats for capacity.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from xpupool.model.errors import RequestError

MIB = 1024 * 1024
# The one table of units (see the module docstring): every prefix binary, with or without 'i'/'B'.
_BYTES_PER_UNIT: dict[str, int] = {
    "": MIB,  # a bare number means MiB
    **dict.fromkeys(("k", "kb", "ki", "kib"), 1024),
    **dict.fromkeys(("m", "mb", "mi", "mib"), MIB),
    **dict.fromkeys(("g", "gb", "gi", "gib"), 1024 * MIB),
    **dict.fromkeys(("t", "tb", "ti", "tib"), 1024 * 1024 * MIB),
}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z%]*)\s*$")
_MEMORY_UNITS_HINT = "use Mi, Gi or Ti (M, MB, G, GB, T and TB mean the same)"


# What a good value looks like, per kind of quantity: the hint every error of that kind ends with.
MEMORY_EXAMPLE = "'16Gi' or '512Mi'"
DEVICE_MEMORY_EXAMPLE = "an amount such as '24Gi' or a share of the card such as '50%'"
CPU_EXAMPLE = "cores such as '2' or '0.5', or millicores such as '500m'"
PERCENT_EXAMPLE = "a percentage such as '50%'"
CARD_EXAMPLE = "a card size such as '80GB'"


def _split(field: str, text: object, example: str) -> tuple[Decimal, str]:
    """``text`` as (number, unit); errors end with ``example``, what this field's value looks like."""
    if isinstance(text, bool):
        raise RequestError(field, text, "expected a quantity, not a boolean")
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise RequestError(field, text, "must be a finite number")
        if text < 0:
            raise RequestError(field, text, "must not be negative")
        return Decimal(str(text)), ""
    if not isinstance(text, str):
        raise RequestError(field, text, f"expected a quantity: {example}")
    match = _NUMBER_UNIT.match(text)
    if match is None:
        if text.strip().startswith("-"):
            raise RequestError(field, text, "must not be negative")
        raise RequestError(field, text, f"not a quantity; expected {example}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex only admits valid decimals
        raise RequestError(field, text, "not a number") from exc
    return number, match.group(2)


def parse_memory_mib(field: str, text: object, example: str = MEMORY_EXAMPLE) -> int:
    """Memory in whole MiB, rounded up. ``24Gi``, ``24G``, ``24GB`` -> 24576, ``512`` -> 512.

    ``example`` ends the error messages: what a value of this field looks like.
    """
    number, unit = _split(field, text, example)
    per_unit = _BYTES_PER_UNIT.get(unit.lower())
    # 'm' is milli in Kubernetes memory; nobody means that for accelerator memory: only 'M' is mega.
    if per_unit is None or unit == "m":
        raise RequestError(
            field, text, f"unknown memory unit {unit!r}; {_MEMORY_UNITS_HINT}; expected {example}"
        )
    return math.ceil(number * per_unit / MIB)


def parse_cpu_milli(field: str, text: object) -> int:
    """CPU in millicores: ``500m`` -> 500, ``2`` -> 2000, ``1.5`` -> 1500."""
    number, unit = _split(field, text, CPU_EXAMPLE)
    if unit == "m":
        if number != number.to_integral_value():
            raise RequestError(field, text, "millicores must be a whole number")
        return int(number)
    if unit:
        raise RequestError(field, text, f"unknown CPU unit {unit!r}; expected {CPU_EXAMPLE}")
    milli = number * 1000
    if milli != milli.to_integral_value():
        raise RequestError(field, text, "finer than one millicore")
    return int(milli)


def parse_percent_permille(field: str, text: object) -> int:
    """A share of one device in thousandths: ``50%`` -> 500, ``12.5%`` -> 125; in (0, 100]%."""
    if isinstance(text, str) and text.strip().endswith("%"):
        number, unit = _split(field, text.strip()[:-1], PERCENT_EXAMPLE)
        if unit:
            raise RequestError(field, text, f"expected {PERCENT_EXAMPLE}")
    elif isinstance(text, int | float) and not isinstance(text, bool):
        number, _ = _split(field, text, PERCENT_EXAMPLE)
    else:
        raise RequestError(field, text, f"expected {PERCENT_EXAMPLE}")
    permille = number * 10
    if permille != permille.to_integral_value():
        raise RequestError(field, text, "finer than 0.1%")
    if not 0 < permille <= 1000:
        raise RequestError(field, text, "must be more than 0% and at most 100%")
    return int(permille)


def parse_device_memory(field: str, text: object) -> tuple[int | None, int | None]:
    """Per-device memory as ``(mib, None)`` for an amount or ``(None, permille)`` for ``NN%``."""
    if isinstance(text, str) and text.strip().endswith("%"):
        return None, parse_percent_permille(field, text)
    mib = parse_memory_mib(field, text, DEVICE_MEMORY_EXAMPLE)
    if mib == 0:
        raise RequestError(field, text, "must be more than 0")
    return mib, None


def format_mib(mib: int) -> str:
    """Short human form of a MiB amount: 81920 -> '80Gi', 512 -> '512Mi'."""
    if mib >= 1024 and mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    if mib >= 1024:
        return f"{mib / 1024:.1f}Gi"
    return f"{mib}Mi"


def format_permille(permille: int) -> str:
    """500 -> '50%', 125 -> '12.5%'."""
    whole, tenth = divmod(permille, 10)
    return f"{whole}%" if tenth == 0 else f"{whole}.{tenth}%"


def format_mib_exact(mib: int) -> str:
    """Lossless form of a MiB amount that :func:`parse_memory_mib` reads back to the same integer.

    ``81920`` -> ``'80Gi'``, ``1500`` -> ``'1500Mi'``, ``0`` -> ``'0Mi'``. Unlike :func:`format_mib`
    (for display) it never rounds, so the canonical JSON and spec forms round-trip.
    """
    if mib >= 1024 and mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


def format_cpu_milli(milli: int) -> str:
    """Lossless CPU form that :func:`parse_cpu_milli` reads back: 4000 -> '4', 1500 -> '1500m'."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


MAX_CARD_MIB = 1 << 40
_CARD_UNITS_HINT = "use MB, GB or TB (GB, G, Gi and GiB all mean GiB)"


def parse_card_mib(field: str, text: object) -> int:
    """A card's nominal size bound in whole MiB, for ``A100:80GB`` and ``card_memory``.

    Card size bounds compare against the size the vendor markets: ``80GB``, ``80G``, ``80Gi`` and
    ``80GiB`` all mean 80 GiB = 81920 MiB, by the module's one rule. A unit is required (a bare
    number in a GPU spec is a count), ``K*`` units and lowercase ``m`` are refused, and the
    result, rounded up, must be more than 0.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        raise RequestError(
            field, text, f"a card size needs a unit such as '80GB'; {_CARD_UNITS_HINT}"
        )
    number, unit = _split(field, text, CARD_EXAMPLE)
    if not unit:
        raise RequestError(
            field, text, f"a card size needs a unit such as '80GB'; {_CARD_UNITS_HINT}"
        )
    per_unit = _BYTES_PER_UNIT.get(unit.lower())
    if per_unit is None or unit == "m" or per_unit < MIB:  # no card is sized in KiB
        raise RequestError(field, text, f"unknown card size unit {unit!r}; {_CARD_UNITS_HINT}")
    mib = math.ceil(number * per_unit / MIB)
    if mib <= 0:
        raise RequestError(field, text, "must be more than 0")
    if mib > MAX_CARD_MIB:
        raise RequestError(field, text, "larger than any card (at most 1048576TB)")
    return mib


def format_card_mib(mib: int) -> str:
    """Canonical card size that :func:`parse_card_mib` reads back: 81920 -> '80GB', 1 -> '1MB'.

    ``GB`` is the binary, marketed unit (see the module docstring).
    """
    if mib >= 1024 and mib % 1024 == 0:
        return f"{mib // 1024}GB"
    return f"{mib}MB"


def parse_card_range(field: str, text: str) -> tuple[int | None, int | None]:
    """Card size bounds in MiB from ``80GB`` (exactly, as dstack reads a single value),
    ``24GB..40GB``, ``48GB..`` (at least) or ``..40GB`` (at most); ``None`` = unbounded.

    Errors name ``field``, or ``field.min``/``field.max`` for one side of a range.
    """
    if ".." not in text:
        mib = parse_card_mib(field, text)
        return mib, mib
    low_text, _, high_text = text.partition("..")
    if ".." in high_text:
        raise RequestError(field, text, "expected one '..' as in '24GB..40GB'")
    if not low_text.strip() and not high_text.strip():
        raise RequestError(field, text, "empty range; give a bound such as '24GB..' or '..40GB'")
    low = parse_card_mib(f"{field}.min", low_text) if low_text.strip() else None
    high = parse_card_mib(f"{field}.max", high_text) if high_text.strip() else None
    if low is not None and high is not None and low > high:
        raise RequestError(field, text, "the lower bound is larger than the upper bound")
    return low, high
