"""What software a container image needs, from its name: rules matched by repository and tag.

``pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime`` carries CUDA 12.4 and torch 2.4, so a job that
runs it needs a driver that serves CUDA 12.4; an Ascend MindIE image for ``800I-A2`` needs a CANN
8.0 driver and a 910B card. Rules live in ``data/images.yaml`` (its header documents the format)
and in an operator's ``--catalog`` file, tried first. :func:`needs_for_image` is pure: it parses
the reference, finds the first rule whose repository and tag both match, and fills the rule's
need templates from the tag's named groups and its per-release tables. An image no rule knows,
or a tag that says no version (``latest``, a digest alone), adds nothing, and the answer says
why so that the job's events can.
"""

from __future__ import annotations

import fnmatch
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from xpupool.catalog._data_file import CatalogFileError, Entry, line_of, read_yaml
from xpupool.catalog.accelerators import AcceleratorCatalog, load_accelerators
from xpupool.catalog.image_ref import ImageRefError, parse_image_ref
from xpupool.model.errors import RequestError
from xpupool.model.request import SoftwareNeed, parse_software_need
from xpupool.model.vendor import VENDOR_KEYS

MAX_PATTERN = 1000  # characters of one repository or tag pattern
MAX_RULES = 10_000

_RULE_FIELDS = frozenset(
    {"name", "repository", "repository_regex", "tag", "needs", "product", "tables", "source"}
    | {"notes"}
)
_TABLE_FIELDS = frozenset({"group", "source", "rows"})
_ROW_FIELDS = frozenset({"match", "needs", "product", "notes"})
_PRODUCT_FIELDS = frozenset({"name", "vendors", "models"})


@dataclass(frozen=True, slots=True)
class ProductLine:
    """The cards an image is built for: ``vendors`` and ``models`` (accelerator families or
    models, as a request's ``devices.models`` takes them) are any-of lists; empty = any."""

    name: str
    vendors: tuple[str, ...] = ()
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TableRow:
    needs: tuple[str, ...]  # templates, as a rule's
    product: ProductLine | None


@dataclass(frozen=True, slots=True)
class LookupTable:
    """Rows keyed by the lowercased text of the tag's group ``group``."""

    group: str
    rows: Mapping[str, TableRow]


@dataclass(frozen=True, slots=True)
class ImageRule:
    name: str
    origin: str  # the file it came from, for events and errors
    repository: re.Pattern[str]
    tag: re.Pattern[str]
    needs: tuple[str, ...]
    product: ProductLine | None
    tables: tuple[LookupTable, ...]
    source: str


@dataclass(frozen=True, slots=True)
class ImageNeeds:
    """What an image asks of the devices that run it.

    ``software``: needs to add to the request; ``product``: the cards it is built for (None:
    any); ``rule``: ``"<file>: <rule name>"`` of the rule that matched, None when none did;
    ``notes``: why nothing (or less than the rule could give) was added, in words for events.
    """

    image: str
    software: tuple[SoftwareNeed, ...] = ()
    product: ProductLine | None = None
    rule: str | None = None
    source: str = ""
    notes: tuple[str, ...] = ()


class ImageCatalog:
    """Rules in the order they are tried (an operator's before the built-in ones)."""

    CACHED = 1024
    """Images whose reading is kept (a workload's pods and jobs share a few images)."""

    def __init__(self, rules: tuple[ImageRule, ...]) -> None:
        self.rules = rules
        self._read: dict[str, ImageNeeds] = {}

    def with_rules_first(self, rules: tuple[ImageRule, ...]) -> ImageCatalog:
        return ImageCatalog(rules + self.rules)

    def needs_for(self, image: str) -> ImageNeeds:
        """See :func:`needs_for_image` (answers for images read before come from a cache)."""
        known = self._read.get(image)
        if known is None:
            known = self._needs_for(image)
            if len(self._read) >= self.CACHED:
                self._read.pop(next(iter(self._read)))
            self._read[image] = known
        return known

    def _needs_for(self, image: str) -> ImageNeeds:
        try:
            ref = parse_image_ref(image)
        except ImageRefError as exc:
            why = f"image {image[:80]!r} is not an image reference ({exc.reason})"
            return ImageNeeds(image, notes=(f"{why}: no software needs added",))
        repository = ref.repository
        known = [rule for rule in self.rules if rule.repository.fullmatch(repository)]
        if not known:
            return ImageNeeds(
                image, notes=(f"no catalog rule knows image {image}: no software needs added",)
            )
        if ref.tag is None or ref.tag == "latest":
            said = "is tagged 'latest'" if ref.tag else "names no tag"
            return ImageNeeds(
                image,
                notes=(
                    f"image {image} {said}, which says no version: no software needs added "
                    f"(catalog rule {known[0].name} reads versioned tags)",
                ),
            )
        for rule in known:
            found = rule.tag.fullmatch(ref.tag)
            if found is not None:
                return _resolve(image, rule, found)
        note = (
            f"catalog rule {known[0].name} knows {repository} but not its tag {ref.tag!r}: "
            "no software needs added"
        )
        return ImageNeeds(image, notes=(note,))


def needs_for_image(image: str, catalog: ImageCatalog | None = None) -> ImageNeeds:
    """The needs ``image`` implies under ``catalog`` (the packaged rules when None). Pure and
    total: a malformed reference, a tag without a version or an unknown image is an answer
    with no needs and a note saying why, never an exception."""
    return (catalog or default_image_catalog()).needs_for(image)


def _resolve(image: str, rule: ImageRule, found: re.Match[str]) -> ImageNeeds:
    groups = {k: v for k, v in found.groupdict().items() if v is not None}
    templates = list(rule.needs)
    product = rule.product
    notes: list[str] = []
    for table in rule.tables:
        value = groups.get(table.group)
        if value is None:
            continue
        row = table.rows.get(value.lower())
        if row is None:
            notes.append(
                f"{table.group} {value!r} is not in catalog rule {rule.name}'s table: "
                "nothing added from it"
            )
            continue
        templates.extend(row.needs)
        product = row.product or product
    needs: list[SoftwareNeed] = []
    for template in templates:
        text = template.format_map(groups)
        try:
            need = parse_software_need(text)
        except RequestError as exc:
            notes.append(f"catalog rule {rule.name} gave {text!r}, not a need ({exc.reason})")
            continue
        if need not in needs:
            needs.append(need)
    return ImageNeeds(
        image,
        tuple(needs),
        product,
        f"{rule.origin}: {rule.name}",
        rule.source,
        tuple(notes),
    )


# ------------------------------------------------------------------ loading
@cache
def default_image_catalog() -> ImageCatalog:
    """The packaged rules (parsed once)."""
    source = files("xpupool.catalog") / "data" / "images.yaml"
    document = read_yaml(source, "images.yaml")
    top = Entry("images.yaml", "", document, frozenset({"images"}))
    return ImageCatalog(parse_image_rules("images.yaml", top, "images"))


def load_image_rules(path: str | Path) -> tuple[ImageRule, ...]:
    """Rules from a file whose top level holds only ``images:`` (tests, other tools); an
    operator's ``--catalog`` file goes through ``catalog/operator_file.py``."""
    label = str(path)
    top = Entry(label, "", read_yaml(Path(path), label), frozenset({"images"}))
    return parse_image_rules(label, top, "images")


def parse_image_rules(label: str, top: Entry, field: str) -> tuple[ImageRule, ...]:
    """The rules under ``field`` of ``top``; raises :class:`CatalogFileError` naming the file,
    line, rule and field of the first mistake (unknown field, bad regex, a template naming a
    group the tag lacks, a need that does not parse, an unknown vendor or model)."""
    items = top.raw(field)
    if not isinstance(items, list) or not items:
        raise top.error(field, "expected a non-empty list of rules")
    if len(items) > MAX_RULES:
        raise top.error(field, f"at most {MAX_RULES} rules")
    accelerators = load_accelerators()
    rules: list[ImageRule] = []
    names: set[str] = set()
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        where = f"{field}[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        entry = Entry(label, where, item, _RULE_FIELDS, line_of(items, index))
        rule = _parse_rule(label, entry, accelerators)
        if rule.name in names:
            raise entry.error("name", f"rule {rule.name!r} is given twice")
        names.add(rule.name)
        rules.append(rule)
    return tuple(rules)


def _parse_rule(label: str, entry: Entry, accelerators: AcceleratorCatalog) -> ImageRule:
    name = entry.text("name")
    given = [f for f in ("repository", "repository_regex") if entry.has(f)]
    if len(given) != 1:
        raise entry.error("repository", "give repository (a glob) or repository_regex, one")
    if given[0] == "repository":
        repository = _pattern(entry, "repository", _glob_regex(entry.text("repository")))
    else:
        repository = _pattern(entry, "repository_regex", entry.text("repository_regex"))
    tag = _pattern(entry, "tag", entry.text("tag"))
    groups = frozenset(tag.groupindex)
    needs = _needs(entry, "needs", groups)
    product = _product(entry, "product", accelerators)
    tables = tuple(
        _table(label, entry, i, raw, groups, accelerators)
        for i, raw in enumerate(_list(entry, "tables"))
    )
    return ImageRule(name, label, repository, tag, needs, product, tables, entry.source())


def _glob_regex(glob: str) -> str:
    """A repository glob as a regex over normalised names: ``pytorch/pytorch`` is Docker Hub's
    and ``ubuntu`` is ``library/ubuntu``, as in references; a first part with a wildcard or a
    host (``*/ascendhub/mindie``, ``nvcr.io/...``) is kept as written."""
    first, slash, _ = glob.partition("/")
    plain = re.fullmatch(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", first) is not None
    if plain and "." not in first and first != "localhost":
        glob = f"docker.io/{glob}" if slash else f"docker.io/library/{glob}"
    translated = fnmatch.translate(glob)
    return translated[4:-3] if translated.startswith("(?s:") else translated


def _pattern(entry: Entry, field: str, text: str) -> re.Pattern[str]:
    if len(text) > MAX_PATTERN:
        raise entry.error(field, f"longer than {MAX_PATTERN} characters")
    try:
        return re.compile(text)
    except re.error as exc:
        raise entry.error(field, f"not a valid regular expression: {exc}") from None


def _list(entry: Entry, field: str) -> list[object]:
    value = entry.data.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise entry.error(field, f"expected a list, got {value!r}")
    return value


def _needs(entry: Entry, field: str, groups: frozenset[str]) -> tuple[str, ...]:
    """Need templates, checked now: every ``{name}`` a group of the tag, and the text with
    sample versions put in a need that parses."""
    out = []
    for text in entry.text_list(field):
        sample: dict[str, str] = {}
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise entry.error(field, f"{text!r}: bad template: {exc}") from None
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if name not in groups or spec or conversion:
                known = ", ".join(sorted(groups)) or "none"
                raise entry.error(
                    field, f"{text!r}: {{{name}}} is not a named group of tag (groups: {known})"
                )
            sample[name] = "1.0"
        try:
            parse_software_need(text.format_map(sample))
        except RequestError as exc:
            raise entry.error(field, f"{text!r}: {exc.reason}") from None
        out.append(text)
    return tuple(out)


def _product(entry: Entry, field: str, accelerators: AcceleratorCatalog) -> ProductLine | None:
    raw = entry.data.get(field)
    if raw is None:
        return None
    product = Entry(entry.path, f"{entry.entry}.{field}", raw, _PRODUCT_FIELDS, entry.line(field))
    vendors = product.text_list("vendors")
    for vendor in vendors:
        if vendor not in VENDOR_KEYS:
            raise product.error(
                "vendors", f"unknown vendor {vendor!r}; known: {', '.join(VENDOR_KEYS)}"
            )
    models = product.text_list("models")
    for model in models:
        if not accelerators.knows(model):
            raise product.error(
                "models", f"no accelerator family or model {model!r} in the catalog"
            )
    if not vendors and not models:
        raise product.error("vendors", "give vendors, models or both")
    return ProductLine(product.text("name"), vendors, models)


def _table(
    label: str,
    rule: Entry,
    index: int,
    raw: object,
    groups: frozenset[str],
    accelerators: AcceleratorCatalog,
) -> LookupTable:
    tables = rule.data.get("tables")
    where = f"{rule.entry}.tables[{index}]"
    table = Entry(label, where, raw, _TABLE_FIELDS, line_of(tables, index))
    group = table.text("group")
    if group not in groups:
        known = ", ".join(sorted(groups)) or "none"
        raise table.error("group", f"{group!r} is not a named group of tag (groups: {known})")
    if table.has("source"):
        table.source()
    items = table.raw("rows")
    if not isinstance(items, list) or not items:
        raise table.error("rows", "expected a non-empty list")
    rows: dict[str, TableRow] = {}
    for r_index, item in enumerate(items):
        row = Entry(label, f"{where}.rows[{r_index}]", item, _ROW_FIELDS, line_of(items, r_index))
        matches = _matches(row)
        parsed = TableRow(_needs(row, "needs", groups), _product(row, "product", accelerators))
        if not parsed.needs and parsed.product is None:
            raise row.error("needs", "a row gives needs, a product or both")
        for value in matches:
            if value.lower() in rows:
                raise row.error("match", f"{value!r} is matched by an earlier row")
            rows[value.lower()] = parsed
    return LookupTable(group, rows)


def _matches(row: Entry) -> tuple[str, ...]:
    value = row.raw("match")
    if isinstance(value, str) and value.strip():
        return (value.strip(),)
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(v.strip() for v in value)
    raise row.error("match", f"expected text or a list of text (quote versions), got {value!r}")


__all__ = [
    "CatalogFileError",
    "ImageCatalog",
    "ImageNeeds",
    "ImageRule",
    "ProductLine",
    "default_image_catalog",
    "load_image_rules",
    "needs_for_image",
    "parse_image_rules",
]
