"""Kubernetes quantities ("2", "500m", "16Gi", "1e3") read exactly, as apimachinery's
``resource.ParseQuantity`` does: pods' resources and nodes' allocatable are written in them."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from xpupool.model.errors import RequestError

MAX_QUANTITY_CHARS = 64


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 100 else text[:100] + "..."


# apimachinery resource.Quantity (pkg/api/resource/quantity.go ParseQuantity): a signed decimal
# and one suffix, binary (Ki..Ei), decimal SI (n u m k M G T P E) or an exponent (e3, E-2).
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(
    where: str, value: object, error: type[RequestError] = RequestError
) -> tuple[Fraction, bool]:
    """A quantity as an exact number and whether it carried a unit suffix (not an exponent);
    a JSON number is read too, as ``Quantity.UnmarshalJSON`` does."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value), False
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(value), False
    if not isinstance(value, str):
        raise error(where, _short(value), "expected a quantity such as '2' or '16Gi'")
    if len(value) > MAX_QUANTITY_CHARS:
        raise error(where, value[:MAX_QUANTITY_CHARS] + "...", "quantity too long")
    match = _QUANTITY.match(value)
    if match is None:
        raise error(where, value, "not a Kubernetes quantity (e.g. '2', '500m', '16Gi')")
    number, suffix = match.groups()
    amount = Fraction(number)
    if not suffix:
        return amount, False
    if suffix in _BINARY:
        return amount * (1 << _BINARY[suffix]), True
    if suffix in _DECIMAL:
        return amount * Fraction(10) ** _DECIMAL[suffix], True
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise error(where, value, "exponent out of range")
    return amount * Fraction(10) ** exponent, False
