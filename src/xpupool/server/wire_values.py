"""Which JSON values the API takes in, and how it shows values back.

JSON can carry what the rest of the system cannot hold: a NUL byte (an argv entry, an
environment variable or a C string ends there, so the agent cannot start the process), a lone
UTF-16 surrogate such as ``"\\ud800"`` (not Unicode text: it cannot be encoded as UTF-8, so every
later reply that includes it fails), and, from Python's JSON parser, ``NaN``, ``Infinity`` and
numbers too large for a float (not JSON numbers; the encoder refuses them on the way out). A
request holding one anywhere, in a key or a value, at any depth, is refused with the path of the
first one (:func:`first_unsafe`). Text an older release stored is shown with U+FFFD in place of
what cannot be encoded (:func:`readable`), and a rejected value is quoted back at most
``MAX_QUOTE`` characters long (:func:`quote`), so an error never echoes a megabyte-long field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TypeVar, cast

T = TypeVar("T")

MAX_QUOTE = 200
"""Characters of a rejected value an error body quotes; the rest is replaced by a marker."""
MAX_REASON = 500
"""Characters of an error's reason (a reason may quote a value, e.g. an invalid key)."""


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be taken in, or None. ASCII needs only the NUL check (fast path)."""
    if "\x00" in text:
        return "contains a NUL byte (U+0000), which no command argument, variable or name can hold"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return f"contains a lone surrogate (U+{code:04X} at index {exc.start}), which is not text"
    return None


def _number_problem(number: float) -> str | None:
    if math.isfinite(number):
        return None
    return f"{number!r} is not a JSON number (NaN, Infinity, or too large for a float)"


def _step(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


def first_unsafe(value: object) -> tuple[str, object, str] | None:
    """The first string or float in ``value`` (nested dicts, lists and tuples, keys included)
    that cannot be taken in, as ``(path, offending value, reason)``; None when all can. The path
    is relative to ``value`` ('' for itself, '[1]', 'devices.model'); an offending key is
    reported at its mapping's path. Iterative: a deeply nested body cannot exhaust the stack.
    Objects of other types (models already validated) are not looked into."""
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem is not None:
                return path, item, problem
        elif isinstance(item, float):
            problem = _number_problem(item)
            if problem is not None:
                return path, item, problem
        elif isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                if isinstance(key, str):
                    problem = _text_problem(key)
                    if problem is not None:
                        return path, key, f"a key {problem}"
                children.append((_step(path, key), child))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend((_step(path, i), child) for i, child in reversed(list(enumerate(item))))
    return None


def _replace_surrogates(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def readable(value: T) -> T:
    """``value`` with every string made encodable (a lone surrogate becomes U+FFFD), for showing
    what an older release stored. Returns ``value`` itself when nothing needed replacing."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return cast(T, _replace_surrogates(value))
        return value
    if isinstance(value, Mapping):
        pairs = [(readable(k), readable(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return cast(T, dict(pairs))
    if isinstance(value, list):
        items = [readable(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else cast(T, items)
    return value


def shorten(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` made readable and cut to ``limit`` characters, with a marker saying how many were
    left out."""
    text = str(readable(text))
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def quote(value: object, limit: int = MAX_QUOTE) -> object:
    """``value`` as an error body may show it: as is when it is JSON of at most ``limit``
    characters; otherwise its JSON (``repr`` when it is not JSON) made readable and shortened to
    ``limit`` characters with a marker. Never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return shorten(value, limit)
    try:
        text = json.dumps(value, allow_nan=False)  # ensure_ascii: a lone surrogate is escaped
    except (TypeError, ValueError):
        return shorten(repr(value), limit)
    if len(text) <= limit and first_unsafe(value) is None:
        return value
    return shorten(text, limit)
