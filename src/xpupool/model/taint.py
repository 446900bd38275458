"""Taints on nodes and tolerations in requests, in Kubernetes' own shapes and with its own rules.

A taint (key, value, effect) keeps work off a node unless the work tolerates it: ``NoSchedule``
always, ``PreferNoSchedule`` when another node will do. The shapes are those of
``Node.spec.taints`` and ``Pod.spec.tolerations`` (``k8s.io/api/core/v1``), checked as
``apis/core/validation`` checks them, and a toleration matches a taint as
``Toleration.ToleratesTaint`` decides: its effect, when given, is the taint's; its key, when
given, is the taint's; ``Exists`` takes any value and ``Equal`` (the default) only its own; an
empty key with ``Exists`` tolerates every taint. So a node an agent registers and one read from
Kubernetes mean the same to the engine. ``NoExecute``, Kubernetes' third effect, keeps new work
off as ``NoSchedule`` does (kube-scheduler's filter counts both) and is a valid record here, but
xpupool never evicts running work for a taint, so the edges where people and agents declare
taints and tolerations (:func:`read_taint`, :func:`supported_effect`) refuse it rather than
pretend to honour it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from xpupool.model.errors import Conflict, RequestError

__all__ = [
    "Taint",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "change_taints",
    "check_taints",
    "check_tolerations",
    "format_toleration",
    "parse_taint",
    "parse_toleration",
    "read_taint",
    "supported_effect",
    "tolerated",
]


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"  # no new work unless tolerated
    PREFER_NO_SCHEDULE = "PreferNoSchedule"  # other nodes first (the taint-toleration scorer)
    NO_EXECUTE = "NoExecute"  # Kubernetes' eviction; xpupool's edges refuse it (no eviction)


class TolerationOperator(StrEnum):
    EXISTS = "Exists"  # any value of the key (every key when the key is empty)
    EQUAL = "Equal"  # the key with this value


KEEP_OFF: frozenset[TaintEffect] = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
"""The effects that keep untolerating work off a node (kube's TaintToleration filter)."""
SUPPORTED_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.PREFER_NO_SCHEDULE)
_EFFECTS = frozenset(e.value for e in TaintEffect)
_NO_EXECUTE = (
    "NoExecute is not supported: xpupool never evicts running work for a taint; use NoSchedule "
    "(and drain the node to move what runs there) or PreferNoSchedule"
)

# apimachinery's qualified name (an optional DNS-subdomain prefix and '/', then a name of at most
# 63 characters) and label value (at most 63, may be empty).
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_KEY_RULE = (
    "a key is a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a "
    "letter or digit, optionally after a DNS prefix and '/' ('example.com/gpu')"
)
_VALUE_RULE = (
    "a value is at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter "
    "or digit, or empty"
)


def check_key(path: str, key: object) -> str:
    """A taint or toleration key as Kubernetes accepts it (a qualified name)."""
    if not isinstance(key, str) or not key:
        raise RequestError(path, key, f"must not be empty; {_KEY_RULE}")
    prefix, sep, name = key.rpartition("/")
    if (
        len(name) > 63
        or not _NAME.match(name)
        or (sep and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)))
    ):
        raise RequestError(path, key, _KEY_RULE)
    return key


def check_value(path: str, value: object) -> str:
    """A taint or toleration value as Kubernetes accepts it (a label value, possibly empty)."""
    if not isinstance(value, str):
        raise RequestError(path, value, f"expected text; {_VALUE_RULE}")
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise RequestError(path, value, _VALUE_RULE)
    return value


def parse_effect(path: str, value: object) -> TaintEffect:
    """``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``, spelt as Kubernetes spells them."""
    if isinstance(value, str) and value in _EFFECTS:
        return TaintEffect(value)
    known = ", ".join(e.value for e in SUPPORTED_EFFECTS)
    raise RequestError(path, value, f"unknown effect; known: {known}")


def supported_effect(path: str, value: object) -> TaintEffect:
    """:func:`parse_effect`, refusing ``NoExecute`` (what xpupool's own edges accept)."""
    effect = parse_effect(path, value)
    if effect is TaintEffect.NO_EXECUTE:
        raise RequestError(path, value, _NO_EXECUTE)
    return effect


@dataclass(frozen=True, slots=True)
class Taint:
    """One taint of a node. Written ``key=value:Effect``, or ``key:Effect`` when the value is
    empty, as ``kubectl taint`` writes it."""

    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def __post_init__(self) -> None:
        check_key("key", self.key)
        check_value("value", self.value)
        object.__setattr__(self, "effect", parse_effect("effect", self.effect))

    @property
    def keeps_off(self) -> bool:
        """True when work that does not tolerate it may not be placed here at all."""
        return self.effect in KEEP_OFF

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect.value}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """One toleration of a request; ``effect`` None tolerates every effect. Kubernetes' rules:
    an empty key needs ``Exists`` (then every taint is tolerated), and ``Exists`` takes no value.
    Errors name the field under ``tolerations[i]``, given as ``path``."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "operator", TolerationOperator(self.operator))
        except ValueError:
            known = ", ".join(o.value for o in TolerationOperator)
            raise RequestError("operator", self.operator, f"known: {known}") from None
        if self.key:
            check_key("key", self.key)
        elif self.operator is not TolerationOperator.EXISTS:
            raise RequestError(
                "operator", self.operator.value, "a toleration without a key must use Exists"
            )
        check_value("value", self.value)
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise RequestError("value", self.value, "must be empty with operator Exists")
        if self.effect is not None:
            object.__setattr__(self, "effect", parse_effect("effect", self.effect))

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``."""
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator is TolerationOperator.EXISTS or self.value == taint.value

    @property
    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.key, self.operator.value, self.value, self.effect or "")


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Does one of ``tolerations`` tolerate ``taint``?"""
    return any(t.tolerates(taint) for t in tolerations)


# ------------------------------------------------------------------------------- reading
def _under(path: str, exc: RequestError) -> RequestError:
    return RequestError(f"{path}.{exc.field}", exc.value, exc.reason)


def parse_taint(path: str, text: object) -> Taint:
    """``key=value:Effect`` or ``key:Effect`` (``kubectl taint``'s form), effect required.
    Does not refuse NoExecute: :func:`read_taint` does."""
    if not isinstance(text, str):
        raise RequestError(path, text, "expected KEY[=VALUE]:EFFECT such as 'gpu=true:NoSchedule'")
    pair, sep, effect = text.rpartition(":")
    if not sep:
        raise RequestError(
            path,
            text,
            "expected KEY[=VALUE]:EFFECT such as 'gpu=true:NoSchedule' (the effect is required: "
            f"{', '.join(e.value for e in SUPPORTED_EFFECTS)})",
        )
    key, _, value = pair.partition("=")
    try:
        return Taint(key, value, parse_effect("effect", effect))
    except RequestError as exc:
        raise _under(path, exc) from None


_TAINT_KEYS = ("key", "value", "effect")


def read_taint(path: str, data: object) -> Taint:
    """A taint as people and agents declare one: ``key=value:Effect`` text or Kubernetes' object
    ``{key, value, effect}``; NoExecute refused (xpupool does not evict)."""
    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in data if k not in _TAINT_KEYS)
        if unknown:
            raise RequestError(
                f"{path}.{unknown[0]}", data[unknown[0]], "unknown key; known: key, value, effect"
            )
        if "effect" not in data:
            raise RequestError(f"{path}.effect", None, "required: NoSchedule or PreferNoSchedule")
        try:
            taint = Taint(
                data.get("key"),  # type: ignore[arg-type]  # checked by Taint
                "" if data.get("value") is None else data["value"],
                parse_effect("effect", data["effect"]),
            )
        except RequestError as exc:
            raise _under(path, exc) from None
    else:
        taint = parse_taint(path, data)
    supported_effect(f"{path}.effect", taint.effect.value)
    return taint


def check_taints(path: str, taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """``taints`` as a tuple in their order; Kubernetes' rule that a node has at most one taint
    per key and effect is a RequestError at ``path[i]``."""
    out = tuple(taints)
    seen: dict[tuple[str, str], int] = {}
    for i, taint in enumerate(out):
        if not isinstance(taint, Taint):
            raise RequestError(f"{path}[{i}]", taint, "expected a taint")
        first = seen.setdefault((taint.key, taint.effect.value), i)
        if first != i:
            raise RequestError(
                f"{path}[{i}]",
                str(taint),
                f"a second taint with key {taint.key!r} and effect {taint.effect.value} "
                f"({path}[{first}]): a node has one per key and effect",
            )
    return out


def parse_toleration(path: str, text: object) -> Toleration:
    """The spec form of a toleration, ``tolerate=...``: ``KEY`` (any value: Exists), ``KEY=VALUE``
    (Equal; ``KEY=`` the empty value), ``*`` (every key: Exists), each with an optional
    ``:EFFECT``; NoExecute refused."""
    if not isinstance(text, str) or not text:
        raise RequestError(path, text, "expected KEY, KEY=VALUE or '*', with an optional :EFFECT")
    pair, sep, effect_text = text.partition(":")
    try:
        effect = supported_effect("effect", effect_text) if sep else None
        key, eq, value = pair.partition("=")
        if key == "*" and not eq:
            return Toleration("", TolerationOperator.EXISTS, "", effect)
        operator = TolerationOperator.EQUAL if eq else TolerationOperator.EXISTS
        if not key:
            raise RequestError("key", key, "give a key, or '*' to tolerate every taint")
        return Toleration(key, operator, value, effect)
    except RequestError as exc:
        raise _under(path, exc) from None


def format_toleration(t: Toleration) -> str:
    """The spec form of ``t``: ``parse_toleration(p, format_toleration(t)) == t``."""
    head = t.key or "*"
    if t.operator is TolerationOperator.EQUAL:
        head += f"={t.value}"
    return head if t.effect is None else f"{head}:{t.effect.value}"


def check_tolerations(path: str, tolerations: Iterable[Toleration]) -> tuple[Toleration, ...]:
    """``tolerations`` in one canonical order (they are any-of: the order means nothing), the
    same one given twice a RequestError at ``path[i]``."""
    given = tuple(tolerations)
    for i, t in enumerate(given):
        if not isinstance(t, Toleration):
            raise RequestError(f"{path}[{i}]", t, "expected a toleration")
    out = tuple(sorted(given, key=lambda t: t.sort_key))
    for i, t in enumerate(out):
        if i and out[i - 1] == t:
            raise RequestError(f"{path}[{i}]", format_toleration(t), "given twice")
    return out


def change_taints(
    node: str,
    taints: tuple[Taint, ...],
    add: Iterable[Taint] = (),
    remove: Iterable[tuple[str, TaintEffect | None]] = (),
    *,
    overwrite: bool = False,
) -> tuple[Taint, ...]:
    """``taints`` after ``kubectl taint`` of ``add`` and ``remove`` ((key, effect) pairs; effect
    None: every effect of the key): all or nothing. A removal must match a taint of the node
    (``remove[i]``); a taint may not be added and removed at once (``add[i]``); an added taint
    with the key and effect of one the node has replaces it in place only with ``overwrite``
    (else :class:`Conflict`); the others go last, in their order."""
    adding = check_taints("add", add)
    removing = tuple(remove)
    for i, (key, effect) in enumerate(removing):
        what = key if effect is None else f"{key}:{effect.value}"
        hit = [t for t in taints if t.key == key and effect in (None, t.effect)]
        if not hit:
            raise RequestError(f"remove[{i}]", what, f"node {node} has no taint {what}")
        for j, t in enumerate(adding):
            if t.key == key and effect in (None, t.effect):
                raise RequestError(f"add[{j}]", str(t), f"also removed in this change ({what})")
    kept = [t for t in taints if not any(k == t.key and e in (None, t.effect) for k, e in removing)]
    for t in adding:
        at = next(
            (i for i, old in enumerate(kept) if (old.key, old.effect) == (t.key, t.effect)), -1
        )
        if at < 0:
            kept.append(t)
        elif not overwrite:
            raise Conflict(
                f"node {node} already has taint {kept[at]} with key {t.key!r} and effect "
                f"{t.effect.value}; nothing changed (overwrite to replace it)"
            )
        else:
            kept[at] = t
    return tuple(kept)
