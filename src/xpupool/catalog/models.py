"""The model catalog: what a model is (the figures its memory depends on) and which runtime serves
it on which vendor's cards.

``plan`` and ``submit --model`` start from a name a user types (``qwen2.5-7b``); this module turns
it into a :class:`ModelSpec` (parameters, layers, heads, MLA figures, precisions) and the
:class:`ServingRuntime` rows that can serve it (image, command template, port, software needs).
The data lives in ``data/models.yaml``, whose header documents every field; loading is strict,
as for the other catalog files, because a mistyped figure would silently mis-size every plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from xpupool.catalog._data_file import CatalogFileError, Entry, read_yaml
from xpupool.model.errors import RequestError
from xpupool.model.request import parse_software_need
from xpupool.model.vendor import VENDOR_KEYS

# Bytes per weight for each precision a model may be served in. int4 ignores the group scales
# (about 1/32 more for group size 128), as published weight tables do (docs/models.md).
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
KINDS = ("decoder", "encoder", "vision")
PLACEHOLDERS = frozenset({"model", "tp", "pp", "port", "max_model_len"})
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

_RUNTIME_FIELDS = frozenset(
    {"name", "vendors", "engine", "image", "command", "port", "software", "precisions"}
    | {"cache_path", "cache_env", "source", "notes"}
)
_MODEL_FIELDS = frozenset(
    {"name", "aliases", "hub_id", "kind", "params_b", "active_params_b", "experts", "layers"}
    | {"hidden_size", "attention_heads", "kv_heads", "head_dim", "mla", "max_context"}
    | {"native_precision", "precisions", "runtimes", "source", "notes"}
)


@dataclass(frozen=True, slots=True)
class ServingRuntime:
    """A serving image for one vendor stack. ``command`` is the argv after the image, with
    ``{model}``, ``{tp}``, ``{pp}``, ``{port}``, ``{max_model_len}`` placeholders;
    ``software`` are request-syntax needs (``cuda>=12.4``) the node's driver must meet.
    ``cache_path`` is where the runtime keeps downloaded weights and ``cache_env`` the variable
    that points it there (vLLM: ``HF_HOME``); the operator's model cache volume is mounted there
    so that a second replica on a node does not download again ("": the runtime has none)."""

    name: str
    vendors: tuple[str, ...]
    engine: str
    image: str
    command: tuple[str, ...]
    port: int
    software: tuple[str, ...]
    precisions: tuple[str, ...]
    source: str
    notes: str = ""
    cache_path: str = ""
    cache_env: str = ""

    def argv(self, *, model: str, tp: int, pp: int, port: int, max_model_len: int) -> list[str]:
        """The command with every placeholder filled (values are never re-scanned)."""
        values = {
            "model": model,
            "tp": str(tp),
            "pp": str(pp),
            "port": str(port),
            "max_model_len": str(max_model_len),
        }
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], part) for part in self.command]


@dataclass(frozen=True, slots=True)
class MlaFigures:
    """DeepSeek's multi-head latent attention: per token and layer the cache keeps one latent of
    ``kv_lora_rank`` values plus ``qk_rope_head_dim`` decoupled RoPE key values."""

    kv_lora_rank: int
    qk_rope_head_dim: int


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One catalog model. Attention figures are None for vision models; ``active_params_b`` and
    the expert counts are None for dense models; ``mla`` is None unless the model uses MLA."""

    name: str
    aliases: tuple[str, ...]
    hub_id: str
    kind: str
    params_b: float
    layers: int | None
    hidden_size: int | None
    attention_heads: int | None
    kv_heads: int | None
    head_dim: int | None
    max_context: int
    native_precision: str
    precisions: tuple[str, ...]
    runtimes: tuple[str, ...]
    source: str
    active_params_b: float | None = None
    experts_total: int | None = None
    experts_active: int | None = None
    mla: MlaFigures | None = None
    notes: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts_total is not None


class ModelCatalog:
    """The models and runtimes, looked up by name or alias (case-insensitive, exact)."""

    def __init__(self, models: tuple[ModelSpec, ...], runtimes: tuple[ServingRuntime, ...]) -> None:
        self.models = models
        self.runtimes = runtimes
        self._runtimes = {r.name: r for r in runtimes}
        self._by_key: dict[str, ModelSpec] = {}
        for model in models:
            for key in (model.name, *model.aliases):
                self._by_key[key.lower()] = model

    def lookup(self, name: str) -> ModelSpec | None:
        return self._by_key.get(name.strip().lower())

    def get(self, name: object, field: str = "model") -> ModelSpec:
        """The model ``name`` names, else a :class:`RequestError` on ``field`` listing names."""
        if not isinstance(name, str) or not name.strip():
            raise RequestError(field, name, "expected a model name such as 'qwen2.5-7b'")
        found = self.lookup(name)
        if found is None:
            known = ", ".join(m.name for m in self.models)
            raise RequestError(field, name, f"no model of that name in the catalog; known: {known}")
        return found

    def runtime(self, name: str) -> ServingRuntime:
        return self._runtimes[name]

    def runtime_for(self, model: ModelSpec, vendor: str, precision: str) -> ServingRuntime | None:
        """The first of the model's runtimes that runs on ``vendor`` cards in ``precision``."""
        for name in model.runtimes:
            runtime = self._runtimes[name]
            if vendor in runtime.vendors and precision in runtime.precisions:
                return runtime
        return None


def load_models(path: str | Path | None = None) -> ModelCatalog:
    """Load ``path``, or the packaged ``models.yaml`` when None (parsed once, then cached).

    Raises :class:`~xpupool.catalog.CatalogFileError` naming the file, entry and field.
    """
    if path is None:
        return _packaged()
    return _parse(read_yaml(Path(path), str(path)), str(path))


@cache
def _packaged() -> ModelCatalog:
    source = files("xpupool.catalog") / "data" / "models.yaml"
    return _parse(read_yaml(source, "models.yaml"), "models.yaml")


def _parse(document: object, label: str) -> ModelCatalog:
    top = Entry(label, "", document, frozenset({"runtimes", "models"}))
    runtimes: list[ServingRuntime] = []
    for index, row in enumerate(_rows(top, "runtimes")):
        runtime = _parse_runtime(label, index, row)
        if any(r.name == runtime.name for r in runtimes):
            raise CatalogFileError(label, f"runtimes[{index}]", "name", "named twice")
        runtimes.append(runtime)
    known_runtimes = {r.name for r in runtimes}
    models: list[ModelSpec] = []
    owner: dict[str, str] = {}
    for index, row in enumerate(_rows(top, "models")):
        model = _parse_model(label, index, row, known_runtimes)
        where = f"models[{index}] ({model.name})"
        for field, keys in (("name", (model.name,)), ("aliases", model.aliases)):
            for key in keys:
                claimed = owner.setdefault(key.lower(), model.name)
                if claimed != model.name:
                    raise CatalogFileError(
                        label, where, field, f"{key!r} already names {claimed!r}"
                    )
        models.append(model)
    return ModelCatalog(tuple(models), tuple(runtimes))


def _rows(top: Entry, field: str) -> list[object]:
    rows = top.raw(field)
    if not isinstance(rows, list) or not rows:
        raise top.error(field, "expected a non-empty list")
    return rows


def _entry(label: str, group: str, index: int, row: object, allowed: frozenset[str]) -> Entry:
    name = row.get("name") if isinstance(row, dict) else None
    return Entry(label, f"{group}[{index}]" + (f" ({name})" if name else ""), row, allowed)


def _precisions(entry: Entry, field: str) -> tuple[str, ...]:
    values = entry.text_list(field)
    if not values:
        raise entry.error(field, "expected at least one precision")
    for value in values:
        if value not in PRECISION_BYTES:
            known = ", ".join(PRECISION_BYTES)
            raise entry.error(field, f"unknown precision {value!r}; known: {known}")
    return values


def _parse_runtime(label: str, index: int, row: object) -> ServingRuntime:
    entry = _entry(label, "runtimes", index, row, _RUNTIME_FIELDS)
    vendors = entry.text_list("vendors")
    if not vendors:
        raise entry.error("vendors", "expected at least one vendor key")
    for vendor in vendors:
        if vendor not in VENDOR_KEYS:
            raise entry.error(
                "vendors", f"unknown vendor {vendor!r}; known: {', '.join(VENDOR_KEYS)}"
            )
    command = entry.text_list("command")
    if not command:
        raise entry.error("command", "expected the argv after the image")
    for part in command:
        for name in _PLACEHOLDER.findall(part):
            if name not in PLACEHOLDERS:
                known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
                raise entry.error("command", f"unknown placeholder {{{name}}}; known: {known}")
    software = entry.text_list("software")
    for text in software:
        try:
            parse_software_need(text, "software")
        except RequestError as exc:
            raise entry.error("software", exc.reason) from None
    port = entry.integer("port", nullable=False)
    assert port is not None
    if port > 65535:
        raise entry.error("port", f"expected a TCP port (1..65535), got {port}")
    cache_path, cache_env = _cache(entry)
    return ServingRuntime(
        name=entry.text("name"),
        vendors=vendors,
        engine=entry.text("engine"),
        image=entry.text("image"),
        command=command,
        port=port,
        software=software,
        precisions=_precisions(entry, "precisions"),
        source=entry.source(),
        notes=entry.optional_text("notes"),
        cache_path=cache_path,
        cache_env=cache_env,
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _cache(entry: Entry) -> tuple[str, str]:
    """``cache_path`` and ``cache_env``, both or neither: a path without its variable would be
    mounted where the runtime may not look."""
    path = entry.optional_text("cache_path")
    env = entry.optional_text("cache_env")
    if bool(path) != bool(env):
        raise entry.error("cache_env" if path else "cache_path", "give cache_path and cache_env")
    if path and (not path.startswith("/") or path == "/" or ".." in path.split("/")):
        raise entry.error("cache_path", f"expected a plain absolute path, got {path!r}")
    if env and not _ENV_NAME.fullmatch(env):
        raise entry.error("cache_env", f"expected a variable name, got {env!r}")
    return path, env


def _optional_int(entry: Entry, field: str) -> int | None:
    return entry.integer(field, nullable=True) if field in entry.data else None


def _parse_model(label: str, index: int, row: object, runtimes: set[str]) -> ModelSpec:
    entry = _entry(label, "models", index, row, _MODEL_FIELDS)
    kind = entry.text("kind")
    if kind not in KINDS:
        raise entry.error("kind", f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    figures = {f: _optional_int(entry, f) for f in _ATTENTION}
    if kind == "vision":
        given = [f for f, v in figures.items() if v is not None]
        if given:
            raise entry.error(given[0], "a vision model has no attention figures")
    else:
        for field, value in figures.items():
            if value is None:
                raise entry.error(field, "missing (needed to size the KV cache)")
        heads, kv = figures["attention_heads"], figures["kv_heads"]
        assert heads is not None and kv is not None
        if heads % kv:
            raise entry.error("kv_heads", f"{kv} does not divide attention_heads {heads}")
    params = entry.number("params_b", nullable=False)
    assert params is not None
    active = (
        entry.number("active_params_b", nullable=True) if entry.has("active_params_b") else None
    )
    experts_total = experts_active = None
    if entry.has("experts"):
        experts = Entry(label, entry.entry, entry.raw("experts"), frozenset({"total", "active"}))
        experts_total = experts.integer("total", nullable=False)
        experts_active = experts.integer("active", nullable=False)
        assert experts_total is not None and experts_active is not None
        if experts_active > experts_total:
            raise entry.error("experts", "active experts exceed the total")
    if (active is None) != (experts_total is None):
        raise entry.error("active_params_b", "give both active_params_b and experts, or neither")
    if active is not None and active > params:
        raise entry.error("active_params_b", f"{active} exceeds params_b {params}")
    mla = None
    if entry.has("mla"):
        raw = Entry(label, entry.entry, entry.raw("mla"), frozenset(_MLA))
        rank, rope = (raw.integer(f, nullable=False) for f in _MLA)
        assert rank is not None and rope is not None
        mla = MlaFigures(rank, rope)
    precisions = _precisions(entry, "precisions")
    native = entry.text("native_precision")
    if native not in precisions:
        raise entry.error("native_precision", f"{native!r} is not one of precisions")
    names = entry.text_list("runtimes") if "runtimes" in entry.data else ()
    for name in names:
        if name not in runtimes:
            raise entry.error("runtimes", f"unknown runtime {name!r}; known: {sorted(runtimes)}")
    max_context = entry.integer("max_context", nullable=False)
    assert max_context is not None
    return ModelSpec(
        name=entry.text("name"),
        aliases=entry.text_list("aliases"),
        hub_id=entry.text("hub_id"),
        kind=kind,
        params_b=params,
        layers=figures["layers"],
        hidden_size=figures["hidden_size"],
        attention_heads=figures["attention_heads"],
        kv_heads=figures["kv_heads"],
        head_dim=figures["head_dim"],
        max_context=max_context,
        native_precision=native,
        precisions=precisions,
        runtimes=names,
        source=entry.source(),
        active_params_b=active,
        experts_total=experts_total,
        experts_active=experts_active,
        mla=mla,
        notes=entry.optional_text("notes"),
    )


_ATTENTION = ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim")
_MLA = ("kv_lora_rank", "qk_rope_head_dim")
