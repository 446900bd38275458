"""Read one catalog YAML file and pull typed fields out of it, failing with the exact place.

Catalog files are written by people, so a mistake must point at the file, the entry and the field
(``accelerators.yaml: models[12] (A100-SXM4-80GB): memory_gib: expected a number``). Both loaders
(accelerators, compatibility) read through here so that every data error has that one shape.
Reading is strict: unknown keys are errors, because a typo in a data file would otherwise be a
silently ignored figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from xpupool.model.errors import CatalogError
from xpupool.model.version import Version, parse_version


class CatalogFileError(CatalogError):
    """A malformed catalog file: ``path`` (the file), ``entry`` (``models[3] (T4)``, or ``""`` for
    the whole file), ``field`` (the key inside the entry) and ``reason``."""

    def __init__(self, path: str, entry: str, field: str, reason: str) -> None:
        self.path = path
        self.entry = entry
        self.field = field
        self.reason = reason
        where = ": ".join(part for part in (path, entry, field) if part)
        super().__init__(f"{where}: {reason}")


def read_yaml(source: Path | Traversable, label: str) -> object:
    """Parse ``source``; raises :class:`CatalogFileError` naming ``label`` on I/O or YAML errors."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogFileError(label, "", "", f"cannot read file: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogFileError(label, "", "", f"not valid YAML: {exc}") from exc


class Entry:
    """Typed access to one mapping in a catalog file; every failure names path, entry and field."""

    def __init__(self, path: str, entry: str, data: object, allowed: frozenset[str]) -> None:
        self.path = path
        self.entry = entry
        if not isinstance(data, Mapping):
            raise CatalogFileError(path, entry, "", "expected a mapping of field: value")
        for key in data:
            if key not in allowed:
                raise CatalogFileError(
                    path, entry, str(key), f"unknown field; known: {', '.join(sorted(allowed))}"
                )
        self.data: Mapping[object, object] = data

    def error(self, field: str, reason: str) -> CatalogFileError:
        return CatalogFileError(self.path, self.entry, field, reason)

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
