"""A job's declared relative speed per card model (``speed=A100:1.0,910B3:0.7``) and its kind.

The same job runs at different speeds on different cards, and not in the same order for every job
(Gavel, OSDI 2020: V100 over K80 from 0.66x to 11.6x). A job that knows its speeds says so; the
throughput policy (``engine/scorers/throughput.py``) prefers the cards where it runs best. Values
are relative (any positive unit: steps/s, tokens/s, or 1.0 for the reference card): only their
ratios matter. Model names are matched case-insensitively against a card's model and type
strings, as the request's model list is. ``kind`` names the job type (``resnet50``, ``llm-decode``)
under which the server learns and estimates speeds (``catalog/throughput.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from xpupool.model.errors import RequestError

MAX_SPEEDS = 64  # more card models than any pool has
MAX_KIND_CHARS = 128

Speeds = tuple[tuple[str, float], ...]


def parse_speeds(path: str, value: object) -> Speeds:
    """``"A100:1.0,910B3:0.7"`` or ``{"A100": 1.0, "910B3": 0.7}`` as (model, speed) pairs in the
    order given; every speed finite and > 0, every model named once (case-insensitively)."""
    if isinstance(value, str):
        pairs: list[tuple[str, object]] = []
        for i, part in enumerate(p for p in value.split(",") if p.strip()):
            model, sep, number = part.strip().rpartition(":")
            if not sep or not model:
                raise RequestError(
                    f"{path}[{i}]", part, "expected MODEL:SPEED such as 'A100:1.0,910B3:0.7'"
                )
            pairs.append((model, number))
    elif isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        pairs = []
        for i, item in enumerate(value):
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise RequestError(f"{path}[{i}]", item, "expected a (model, speed) pair")
            pairs.append((str(item[0]), item[1]))
    else:
        raise RequestError(path, value, "expected 'MODEL:SPEED,...' or an object model -> speed")
    return check_speeds(path, pairs)


def check_speeds(path: str, pairs: list[tuple[str, object]] | Speeds) -> Speeds:
    if len(pairs) > MAX_SPEEDS:
        raise RequestError(path, len(pairs), f"at most {MAX_SPEEDS} card models")
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for i, (model, raw) in enumerate(pairs):
        at = f"{path}.{model}" if model else f"{path}[{i}]"
        if not model or model != model.strip() or "," in model or ":" in model:
            raise RequestError(at, model, "a model name is non-empty, without ',' or ':'")
        if model.upper() in seen:
            raise RequestError(at, model, "model given twice")
        seen.add(model.upper())
        try:
            number = isinstance(raw, int | float | str) and not isinstance(raw, bool)
            speed = float(raw) if number else math.nan  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise RequestError(at, raw, "speed must be a number") from None
        if not math.isfinite(speed) or speed <= 0:
            raise RequestError(at, raw, "speed must be finite and > 0")
        out.append((model, speed))
    return tuple(out)


def format_speeds(speeds: Speeds) -> str:
    """The compact text of ``speeds``; ``parse_speeds(p, format_speeds(s)) == s``."""
    return ",".join(f"{model}:{_number(speed)}" for model, speed in speeds)


def _number(speed: float) -> str:
    short = f"{speed:g}"
    return short if float(short) == speed else repr(speed)


def check_kind(path: str, value: object) -> str:
    """A job kind: non-empty text without whitespace, at most MAX_KIND_CHARS."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise RequestError(path, value, "a kind is non-empty text without whitespace")
    if len(value) > MAX_KIND_CHARS:
        raise RequestError(path, value[:40], f"at most {MAX_KIND_CHARS} characters")
    return value
