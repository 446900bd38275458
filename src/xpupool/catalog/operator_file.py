"""An operator's catalog file (``xpupool up --catalog FILE``): site rules read at start.

The file is YAML whose top-level keys are sections, each read by its own parser: ``images:``
holds image rules in the shape of ``data/images.yaml`` (tried before the built-in ones);
``accelerators:`` overrides a card model's compute units and watts (``catalog/power.py``). A
section no parser reads is an error, so a typo (``image:``) never silently drops a site's rules.
New sections register a parser in :data:`SECTIONS` (the model catalog will add ``models:``);
until one does, ``models:`` is refused as not supported yet. Everything is checked at load, and
every error names the file, the line and the field, so a bad file stops the server at start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xpupool.catalog._data_file import CatalogFileError, Entry, line_of, read_yaml
from xpupool.catalog.images import ImageRule, parse_image_rules
from xpupool.catalog.power import Override, parse_overrides

# (file label, the top-level entry, the section's key) -> the section, parsed and validated.
SectionParser = Callable[[str, Entry, str], object]

SECTIONS: dict[str, SectionParser] = {
    "images": parse_image_rules,
    "accelerators": parse_overrides,  # compute units and watts per card model (power.py)
}

# Sections that are known to come but have no parser yet: refused with this reason.
PLANNED: dict[str, str] = {"models": "not supported yet"}


@dataclass(frozen=True, slots=True)
class OperatorCatalog:
    """The parsed sections of one file, by key; ``path`` is the file as given."""

    path: str
    sections: Mapping[str, object] = field(default_factory=dict)

    @property
    def images(self) -> tuple[ImageRule, ...]:
        rules = self.sections.get("images", ())
        assert isinstance(rules, tuple)
        return rules

    @property
    def accelerators(self) -> tuple[Override, ...]:
        overrides = self.sections.get("accelerators", ())
        assert isinstance(overrides, tuple)
        return overrides


def load_operator_catalog(path: str | Path) -> OperatorCatalog:
    """Read and check ``path``; raises :class:`CatalogFileError` (file, line, entry, field) at
    the first mistake: unreadable file, bad YAML, an unknown or planned section, or any error a
    section's parser finds."""
    label = str(path)
    document = read_yaml(Path(path), label)
    if document is None:
        raise CatalogFileError(label, "", "", "empty file; expected sections such as images:")
    if not isinstance(document, Mapping):
        raise CatalogFileError(
            label, "", "", "expected a mapping of sections such as images:", line_of(document)
        )
    for key in document:
        if key in SECTIONS:
            continue
        line = line_of(document, key)
        if key in PLANNED:
            raise CatalogFileError(label, "", str(key), PLANNED[str(key)], line)
        known = ", ".join(sorted(SECTIONS))
        raise CatalogFileError(label, "", str(key), f"unknown section; known: {known}", line)
    top = Entry(label, "", document, frozenset(SECTIONS))
    sections = {str(key): SECTIONS[str(key)](label, top, str(key)) for key in document}
    return OperatorCatalog(label, sections)
