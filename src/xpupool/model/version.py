"""Compare the version strings that vendor tools print.

Drivers and runtimes do not follow one scheme: NVIDIA ``550.54.15``, CUDA ``12.4``, CANN
``8.0.RC1`` and ``8.0.0``, Ascend driver ``24.1.rc2``, ROCm ``6.1.2``, amdgpu ``6.7.0``. A version
is split into numeric and word parts; a pre-release tag (``rc``/``alpha``/``beta``) sorts before
the release it precedes, so ``8.0.RC1 < 8.0.RC3 < 8.0.0``. Comparison is total and deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from xpupool.model.errors import RequestError

_TOKEN = re.compile(r"(\d+|[A-Za-z]+)")
_PRE_RELEASE = {"alpha": -3, "a": -3, "beta": -2, "b": -2, "rc": -1, "t": -4}
OPERATORS = (">=", "<=", "==", "!=", ">", "<", "~=")


@total_ordering
@dataclass(frozen=True, slots=True)
class Version:
    """A parsed version; ``key`` is a tuple of (rank, number) pairs that sorts correctly."""

    text: str
    key: tuple[tuple[int, int], ...]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return _padded(self.key, len(other.key)) < _padded(other.key, len(self.key))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return _padded(self.key, len(other.key)) == _padded(other.key, len(self.key))

    def __hash__(self) -> int:
        key = list(self.key)
        while key and key[-1] == (1, 0):
            key.pop()
        return hash(tuple(key))

    def __str__(self) -> str:
        return self.text

    def release(self, parts: int) -> tuple[int, ...]:
        """The first ``parts`` numeric components (missing ones are 0): ``8.0.RC1`` -> (8, 0)."""
        numbers = [n for rank, n in self.key if rank == 1]
        return tuple((numbers + [0] * parts)[:parts])


def _padded(key: tuple[tuple[int, int], ...], length: int) -> tuple[tuple[int, int], ...]:
    # A missing component counts as a zero release number: 12.4 == 12.4.0.
    return key + ((1, 0),) * max(0, length - len(key))


def parse_version(text: str, field: str = "version") -> Version:
    """Parse ``text``; raises :class:`RequestError` naming ``field`` when it holds no number."""
    if not isinstance(text, str):
        raise RequestError(field, text, "expected a version string such as '12.4'")
    cleaned = text.strip()
    tokens = _TOKEN.findall(cleaned)
    if not tokens or not tokens[0].isdigit():
        raise RequestError(
            field, text, "not a version; expected something like '12.4' or '8.0.RC1'"
        )
    key: list[tuple[int, int]] = []
    for token in tokens:
        if token.isdigit():
            key.append((1, int(token)))
            continue
        word = token.lower()
        if word not in _PRE_RELEASE:
            raise RequestError(field, text, f"unexpected word {token!r} in version")
        key.append((_PRE_RELEASE[word], 0))
    # 'RC1' tokenises as 'RC', '1': fold the number into the pre-release marker so it does not
    # read as a release component (8.0.RC1 must sort below 8.0.0).
    folded: list[tuple[int, int]] = []
    for rank, number in key:
        if folded and folded[-1][0] < 1 and folded[-1][1] == 0 and rank == 1:
            folded[-1] = (folded[-1][0], number)
        else:
            folded.append((rank, number))
    return Version(cleaned, tuple(folded))


def compare(left: Version, op: str, right: Version) -> bool:
    """``left op right`` for one of :data:`OPERATORS`.

    ``~=`` means same release series (``~=12.4`` is ``>=12.4, ==12.*``), as in PEP 440.
    """
    if op == ">=":
        return left >= right
    if op == "<=":
        return left <= right
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == ">":
        return left > right
    if op == "<":
        return left < right
    if op == "~=":
        numbers = right.release(len(right.key))
        series = [n for r, n in right.key if r == 1]
        prefix_len = max(1, len(series) - 1)
        return left >= right and left.release(prefix_len) == tuple(numbers[:prefix_len])
    raise ValueError(f"unknown operator {op!r}")
