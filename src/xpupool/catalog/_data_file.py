"""Read one catalog YAML file and pull typed fields out of it, failing with the exact place.

Catalog files are written by people, so a mistake must point at the file, the entry and the field
(``accelerators.yaml:212: models[12] (A100-SXM4-80GB): memory_gib: expected a number``). Every
catalog loader (accelerators, compatibility, images, an operator's ``--catalog`` file) reads
through here so that every data error has that one shape. Mappings and lists come back as
:class:`LocatedDict` / :class:`LocatedList`, which remember the line of each key and item, so an
error points at the line to edit. Reading is strict: unknown keys are errors, because a typo in a
data file would otherwise be a silently ignored figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from xpupool.model.errors import CatalogError
from xpupool.model.version import Version, parse_version


class CatalogFileError(CatalogError):
    """A malformed catalog file: ``path`` (the file), ``line`` (1-based, None when unknown),
    ``entry`` (``models[3] (T4)``, or ``""`` for the whole file), ``field`` (the key inside the
    entry) and ``reason``. The message reads ``path:line: entry: field: reason``."""

    def __init__(
        self, path: str, entry: str, field: str, reason: str, line: int | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.entry = entry
        self.field = field
        self.reason = reason
        place = path if line is None else f"{path}:{line}"
        where = ": ".join(part for part in (place, entry, field) if part)
        super().__init__(f"{where}: {reason}")


class LocatedDict(dict[object, object]):
    """A YAML mapping that knows its own line and each key's line (1-based)."""

    line: int | None = None
    key_lines: dict[object, int]

    def line_of(self, key: object) -> int | None:
        return getattr(self, "key_lines", {}).get(key, self.line)


class LocatedList(list[object]):
    """A YAML sequence that knows its own line and each item's line (1-based)."""

    line: int | None = None
    item_lines: list[int]


# libyaml's parser when PyYAML was built with it (its wheels are): the catalogs are read at every
# start, and the pure-Python parser was a large part of the start's CPU (docs/benchmarks.md,
# start-up).
if TYPE_CHECKING or not getattr(yaml, "__with_libyaml__", False):
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = yaml.CSafeLoader


class _LineLoader(_SafeLoader):
    """SafeLoader whose mappings and sequences carry the lines they came from."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LocatedDict:
    loader.flatten_mapping(node)
    out = LocatedDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be plain text", key_node.start_mark
            )
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LocatedList:
    out = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)
_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
    _construct_sequence,
)


def line_of(data: object, key: object = None) -> int | None:
    """The line of ``key`` in ``data`` (a located mapping's key or a located list's index), else
    of ``data`` itself; None for plain values."""
    if isinstance(data, LocatedDict):
        return data.line_of(key) if key is not None else data.line
    if isinstance(data, LocatedList):
        if isinstance(key, int) and 0 <= key < len(getattr(data, "item_lines", [])):
            return data.item_lines[key]
        return data.line
    return None


def read_yaml(source: Path | Traversable, label: str) -> object:
    """Parse ``source``; raises :class:`CatalogFileError` naming ``label`` (and the line, when
    YAML says it) on I/O or YAML errors. Mappings and lists carry their lines (see above)."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogFileError(label, "", "", f"cannot read file: {exc}") from exc
    try:
        return yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise CatalogFileError(label, "", "", f"not valid YAML: {exc}", line) from exc


class Entry:
    """Typed access to one mapping in a catalog file; every failure names path, entry and field."""

    def __init__(
        self,
        path: str,
        entry: str,
        data: object,
        allowed: frozenset[str],
        line: int | None = None,
    ) -> None:
        """``line``: where the entry sits, for an entry that is not a mapping (a list's item
        line); a located mapping knows its own."""
        self.path = path
        self.entry = entry
        if not isinstance(data, Mapping):
            raise CatalogFileError(
                path, entry, "", "expected a mapping of field: value", line_of(data) or line
            )
        for key in data:
            if key not in allowed:
                raise CatalogFileError(
                    path,
                    entry,
                    str(key),
                    f"unknown field; known: {', '.join(sorted(allowed))}",
                    line_of(data, key),
                )
        self.data: Mapping[object, object] = data

    def error(self, field: str, reason: str) -> CatalogFileError:
        return CatalogFileError(self.path, self.entry, field, reason, self.line(field))

    def line(self, field: str = "") -> int | None:
        """The line of ``field`` when the file gives it, else of the entry; None when unknown."""
        return line_of(self.data, field or None)

    def has(self, field: str) -> bool:
        return self.data.get(field) is not None

    def raw(self, field: str) -> object:
        if field not in self.data:
            raise self.error(field, "missing")
        return self.data[field]

    def text(self, field: str) -> str:
        value = self.raw(field)
        if not isinstance(value, str) or not value.strip():
            raise self.error(field, f"expected non-empty text, got {value!r}")
        return value.strip()

    def optional_text(self, field: str) -> str:
        value = self.data.get(field)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(field, f"expected text, got {value!r}")
        return value.strip()

    def number(self, field: str, *, nullable: bool) -> float | None:
        """A positive number; ``null`` allowed only when ``nullable`` (the field must be present)."""
        value = self.raw(field)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            what = "a positive number or null" if nullable else "a positive number"
            raise self.error(field, f"expected {what}, got {value!r}")
        return float(value)

    def integer(self, field: str, *, nullable: bool) -> int | None:
        value = self.raw(field)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            what = "a positive whole number or null" if nullable else "a positive whole number"
            raise self.error(field, f"expected {what}, got {value!r}")
        return value

    def text_list(self, field: str) -> tuple[str, ...]:
        value = self.data.get(field)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.error(field, f"expected a list of non-empty text, got {value!r}")
        return tuple(v.strip() for v in value)

    def version(self, field: str, *, required: bool = True) -> Version | None:
        value = self.data.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing")
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            # YAML reads 12.4 as a float: refuse it, since 12.10 would silently become 12.1.
            raise self.error(field, f"quote versions as text ('{value}'), got a number")
        if not isinstance(value, str):
            raise self.error(field, f"expected a version string, got {value!r}")
        try:
            return parse_version(value, field)
        except ValueError as exc:
            raise self.error(field, str(exc)) from exc

    def source(self, field: str = "source") -> str:
        value = self.text(field)
        if not value.startswith(("https://", "http://")):
            raise self.error(field, f"expected a URL, got {value!r}")
        return value
