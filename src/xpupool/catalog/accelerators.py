"""Accelerator models: what a card is, from the name its vendor tool prints.

Probes report the model string exactly as ``nvidia-smi``, ``npu-smi``, ``amd-smi``, ``cnmon`` or
``hy-smi`` print it (``NVIDIA A100-SXM4-80GB``, ``910B3``, ``K100_AI``). This module turns such a
string into a catalog row (memory, peak TFLOPS, power, fast link) and decides which names a user may
write to select it (``A100``, ``a100-80gb``, ``910B``). Matching is exact on normalised names and
never on substrings, so ``T4`` cannot select an ``A10``. The data lives in
``data/accelerators.yaml``; its header documents every field and unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from xpupool.catalog._data_file import CatalogFileError, Entry, read_yaml
from xpupool.model.vendor import VENDOR_KEYS

# Fast links a card can have (the ``link`` field); "pcie" means no vendor fabric.
LINKS: frozenset[str] = frozenset(
    {
        "nvlink",  # NVIDIA NVLink / NVSwitch
        "pcie",  # PCI Express only
        "hccs",  # Huawei Cache Coherence System (Ascend)
        "infinity-fabric",  # AMD Infinity Fabric (xGMI links between Instinct cards)
        "xgmi",  # AMD/Hygon xGMI where the vendor names it so
        "mlulink",  # Cambricon MLU-Link
        "mtlink",  # Moore Threads MTLink
        "metaxlink",  # MetaX MetaXLink
        "xelink",  # Intel Xe Link
        "roce",  # on-chip RDMA over Converged Ethernet (Intel Gaudi)
        "blink",  # Biren BLink
    }
)

_FIELDS = frozenset(
    {
        "vendor",
        "name",
        "family",
        "memory_gib",
        "memory_bandwidth_gbps",
        "memory_bandwidth_source",
        "memory_bandwidth_notes",
        "fp16_tflops",
        "bf16_tflops",
        "tdp_watts",
        "idle_watts",
        "idle_watts_source",
        "link",
        "aliases",
        "source",
        "notes",
    }
)

# Words that tools put before the model name and that carry no model information. Removed only at
# the start of the name, so "A100" inside a name is never touched.
_LEADING_WORDS = frozenset(
    {
        "nvidia",
        "tesla",
        "amd",
        "instinct",
        "huawei",
        "ascend",
        "cambricon",
        "hygon",
        "dcu",
        "moore",
        "threads",
        "mthreads",
        "iluvatar",
        "corex",
        "metax",
        "enflame",
        "kunlunxin",
        "kunlun",
        "intel",
    }
)
_TRADEMARKS = re.compile(r"\((?:r|tm|c)\)|[®™©]", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+")
_GLUED_VENDOR = re.compile(r"^(" + "|".join(sorted(_LEADING_WORDS)) + r")(?=\d)")


def normalise_model_name(text: str) -> str:
    """The one comparison form of a model name: lower case, only letters and digits.

    Case, whitespace, ``_``, ``-``, ``/`` and ``:`` do not matter (``K100_AI`` == ``k100-ai``);
    leading vendor words (``NVIDIA``, ``Tesla``, ``AMD Instinct``, ``Ascend``, ``Huawei``...) and
    trademark marks are dropped, also when glued to a number (``Ascend910B3`` -> ``910b3``).
    Deterministic and total: any string maps to a (possibly empty) key.
    """
    tokens = _TOKEN.findall(_TRADEMARKS.sub(" ", text.lower()))
    while tokens and tokens[0] in _LEADING_WORDS:
        tokens.pop(0)
    if tokens:
        tokens[0] = _GLUED_VENDOR.sub("", tokens[0])
    return "".join(tokens)


@dataclass(frozen=True, slots=True)
class AcceleratorModel:
    """One catalog row. Figures are per device as the vendor tool lists it (one GCD of an MI250X,
    one die of a 910C); ``None`` means the vendor publishes no figure (``notes`` says why).

    memory_gib: nominal memory as marketed, GiB-ish (vendors market "80GB"); fp16/bf16_tflops: peak
    dense tensor throughput without sparsity; tdp_watts: board power; link: one of :data:`LINKS`;
    memory_bandwidth_gbps: peak device memory bandwidth, GB/s (decimal), which bounds decode
    speed (catalog/sizing.py), with its own source since datasheets differ.
    """

    vendor: str
    name: str
    family: str
    memory_gib: float
    fp16_tflops: float | None
    bf16_tflops: float | None
    tdp_watts: int | None
    link: str
    aliases: tuple[str, ...]
    source: str
    notes: str = ""
    memory_bandwidth_gbps: float | None = None
    memory_bandwidth_source: str = ""
    memory_bandwidth_notes: str = ""
    # board power with nothing running (W), with its own source; None: no published or measured
    # figure (catalog/power.py then takes 0 W idle: energy scales with utilisation alone)
    idle_watts: float | None = None
    idle_watts_source: str = ""


class AcceleratorCatalog:
    """The accelerator models, indexed by normalised name and alias. Lookups are pure and cached."""

    def __init__(self, models: tuple[AcceleratorModel, ...]) -> None:
        self.models = models
        self._by_name: dict[str, AcceleratorModel] = {}
        self._by_alias: dict[str, AcceleratorModel] = {}
        self._by_family: dict[str, tuple[AcceleratorModel, ...]] = {}
        for model in models:
            self._by_name[normalise_model_name(model.name)] = model
            for alias in model.aliases:
                self._by_alias.setdefault(normalise_model_name(alias), model)
            key = normalise_model_name(model.family)
            self._by_family[key] = (*self._by_family.get(key, ()), model)
        self._keys: dict[tuple[str, str | None], frozenset[str]] = {}
        self._any_keys = frozenset(
            key for model in models for key in self.match_keys(model.name, model.vendor)
        )

    def lookup(self, printed: str, vendor: str | None = None) -> AcceleratorModel | None:
        """The model a vendor tool's name refers to, or None.

        Exact match after :func:`normalise_model_name`; a canonical name wins over an alias. A
        family name alone (``A100``) names no single model and returns None. When ``vendor`` is
        given, a model of another vendor is not returned.
        """
        key = normalise_model_name(printed)
        model = self._by_name.get(key) or self._by_alias.get(key)
        if model is None or (vendor is not None and model.vendor != vendor):
            return None
        return model

    def match_keys(self, printed: str, vendor: str | None = None) -> frozenset[str]:
        """Normalised tokens that select a device printing ``printed``.

        Always the normalised printed name (so unknown names such as the Alibaba trace's ``G2`` or
        ``V100M16`` can still be selected exactly); for a known model also its canonical name,
        family, aliases and ``<family>-<memory>gb`` (``a100-80gb``).
        """
        cache_key = (printed, vendor)
        found = self._keys.get(cache_key)
        if found is not None:
            return found
        keys = {normalise_model_name(printed)}
        model = self.lookup(printed, vendor)
        if model is not None:
            names = (model.name, model.family, *model.aliases)
            keys.update(normalise_model_name(n) for n in names)
            keys.add(normalise_model_name(f"{model.family}-{int(model.memory_gib)}gb"))
        keys.discard("")
        result = frozenset(keys)
        self._keys[cache_key] = result
        return result

    def matches(self, token: str, printed: str, vendor: str | None = None) -> bool:
        """Does the user's ``token`` select a device that prints ``printed``? Exact, no substrings."""
        key = normalise_model_name(token)
        return bool(key) and key in self.match_keys(printed, vendor)

    def knows(self, token: str) -> bool:
        """Does ``token`` select some catalog model (a name, family, alias or ``a100-80gb``)?

        A user's name that selects no catalog model and no device of the pool can never match:
        the server refuses it at submission instead of letting the job wait forever.
        """
        key = normalise_model_name(token)
        return bool(key) and key in self._any_keys

    def by_family(self, family: str) -> tuple[AcceleratorModel, ...]:
        """All models of a family (``910B`` -> 910B1..910B4), in file order; empty when unknown."""
        return self._by_family.get(normalise_model_name(family), ())


def load_accelerators(path: str | Path | None = None) -> AcceleratorCatalog:
    """Load the catalog from ``path``, or the packaged data when None (parsed once, then cached).

    Raises :class:`~xpupool.catalog.CatalogFileError` (a ``CatalogError``) naming the file, the
    entry (``models[3] (T4)``) and the field when the file is malformed.
    """
    if path is None:
        return _packaged_catalog()
    return _parse(read_yaml(Path(path), str(path)), str(path))


@cache
def _packaged_catalog() -> AcceleratorCatalog:
    source = files("xpupool.catalog") / "data" / "accelerators.yaml"
    return _parse(read_yaml(source, "accelerators.yaml"), "accelerators.yaml")


def _parse(document: object, label: str) -> AcceleratorCatalog:
    top = Entry(label, "", document, frozenset({"models"}))
    rows = top.raw("models")
    if not isinstance(rows, list) or not rows:
        raise top.error("models", "expected a non-empty list of models")
    models: list[AcceleratorModel] = []
    owner: dict[str, str] = {}  # normalised name/alias -> canonical name that claims it
    for index, row in enumerate(rows):
        model = _parse_model(label, index, row)
        where = f"models[{index}] ({model.name})"
        for field, names in (("name", (model.name,)), ("aliases", model.aliases)):
            for name in names:
                key = normalise_model_name(name)
                if not key:
                    raise CatalogFileError(label, where, field, f"{name!r} normalises to nothing")
                claimed = owner.setdefault(key, model.name)
                if claimed != model.name:
                    raise CatalogFileError(
                        label, where, field, f"{name!r} already names model {claimed!r}"
                    )
        models.append(model)
    return AcceleratorCatalog(tuple(models))


def _parse_model(label: str, index: int, row: object) -> AcceleratorModel:
    name = row.get("name") if isinstance(row, dict) else None
    entry = Entry(label, f"models[{index}]" + (f" ({name})" if name else ""), row, _FIELDS)
    vendor = entry.text("vendor")
    if vendor not in VENDOR_KEYS:
        raise entry.error("vendor", f"unknown vendor {vendor!r}; known: {', '.join(VENDOR_KEYS)}")
    link = entry.text("link")
    if link not in LINKS:
        raise entry.error("link", f"unknown link {link!r}; known: {', '.join(sorted(LINKS))}")
    memory_gib = entry.number("memory_gib", nullable=False)
    assert memory_gib is not None
    # Optional in a site's own file (absent = unknown); the packaged file gives it for every
    # card, each with its source (tests/unit/catalog/test_models.py).
    bandwidth = bandwidth_source = None
    if "memory_bandwidth_gbps" in entry.data:
        bandwidth = entry.number("memory_bandwidth_gbps", nullable=True)
        bandwidth_source = entry.source("memory_bandwidth_source")
    elif entry.has("memory_bandwidth_source"):
        raise entry.error("memory_bandwidth_source", "given without memory_bandwidth_gbps")
    idle_watts = idle_source = None
    if "idle_watts" in entry.data:
        idle_watts = entry.number("idle_watts", nullable=True)
        idle_source = entry.source("idle_watts_source")
    elif entry.has("idle_watts_source"):
        raise entry.error("idle_watts_source", "given without idle_watts")
    return AcceleratorModel(
        vendor=vendor,
        name=entry.text("name"),
        family=entry.text("family"),
        memory_gib=memory_gib,
        fp16_tflops=entry.number("fp16_tflops", nullable=True),
        bf16_tflops=entry.number("bf16_tflops", nullable=True),
        tdp_watts=entry.integer("tdp_watts", nullable=True),
        link=link,
        aliases=entry.text_list("aliases"),
        source=entry.source(),
        notes=entry.optional_text("notes"),
        memory_bandwidth_gbps=bandwidth,
        memory_bandwidth_source=bandwidth_source or "",
        memory_bandwidth_notes=entry.optional_text("memory_bandwidth_notes"),
        idle_watts=idle_watts,
        idle_watts_source=idle_source or "",
    )
