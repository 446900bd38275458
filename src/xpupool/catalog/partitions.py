"""Hardware partition schemes: which cards can be cut into isolated instances, into which profiles.

A partition (an NVIDIA MIG instance, an Ascend vNPU) has its own memory, cache and fault domain;
a software share (``mem=20Gi``) does not. The geometry differs per model and memory size
(``3g.40gb`` exists on an A100-80GB, not on an A100-40GB; the 910B3's templates are
``vir05_1c_16g`` and ``vir10_3c_32g``), so it is data: ``data/partitions.yaml``, whose header
documents every field and cites the vendor source per scheme. What layouts a scheme allows is
decided in ``partition_geometry.py``; this module only reads and looks up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from xpupool.catalog._data_file import CatalogFileError, Entry, read_yaml
from xpupool.catalog.accelerators import AcceleratorCatalog, normalise_model_name
from xpupool.model.errors import RequestError

KINDS = ("mig", "vnpu")  # NVIDIA Multi-Instance GPU; Huawei Ascend vNPU templates
_SCHEME_FIELDS = frozenset(
    {
        "models",
        "kind",
        "compute_slices",
        "memory_slices",
        "memory_mib",
        "aicpu",
        "source",
        "section",
        "notes",
        "profiles",
    }
)
_MIG_FIELDS = frozenset(
    {"name", "compute", "memory", "memory_gib", "memory_mib", "starts", "max_instances"}
)
_VNPU_FIELDS = frozenset({"name", "compute", "memory_mib", "aicpu"})


@dataclass(frozen=True, slots=True)
class PartitionProfile:
    """One profile of a scheme. ``compute``: compute slices (MIG) or AI cores (vNPU).
    ``memory_slices`` and ``starts`` (the first memory slice an instance may occupy) are MIG's;
    a vNPU profile has none (empty ``starts``: carved from pooled memory, anywhere).
    ``memory_mib`` is the instance's memory: MIG's as NVML reports it where the catalog has read it
    on a card (less than the name says: docs/hardware-validation.md), else the size in its name, in
    GiB, times 1024. ``max_instances`` bounds instances of this profile per card (None: the totals only).
    ``media`` marks a MIG ``+me`` profile: a card holds at most one of them."""

    name: str
    compute: int
    memory_mib: int
    memory_slices: int = 0
    starts: tuple[int, ...] = ()
    max_instances: int | None = None
    aicpu: int = 0

    @property
    def media(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True, slots=True)
class PartitionScheme:
    """How one set of models is cut: the card's totals and its profiles, in file order (smallest
    first). ``memory_slices`` > 0 for MIG (placements matter); 0 for vNPU (totals only)."""

    kind: str
    models: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    memory_mib: int
    aicpu: int
    profiles: tuple[PartitionProfile, ...]
    source: str
    section: str

    @property
    def positional(self) -> bool:
        """Do instances occupy fixed memory slices (MIG), so that placement matters?"""
        return self.memory_slices > 0

    def profile(self, name: str) -> PartitionProfile | None:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def smallest_holding(self, memory_mib: int) -> PartitionProfile | None:
        """The profile an isolated request of ``memory_mib`` takes: the fewest compute slices
        whose memory holds it, then the least memory; never a ``+me`` profile (media engines are
        asked for by name). None when no profile holds it."""
        fitting = [p for p in self.profiles if p.memory_mib >= memory_mib and not p.media]
        if not fitting:
            return None
        return min(fitting, key=lambda p: (p.compute, p.memory_mib))


class PartitionCatalog:
    """Schemes indexed by normalised model name; lookups are pure."""

    def __init__(self, schemes: tuple[PartitionScheme, ...]) -> None:
        self.schemes = schemes
        self._by_name: dict[str, PartitionScheme] = {}
        for scheme in schemes:
            for name in scheme.models:
                self._by_name[normalise_model_name(name)] = scheme

    def scheme_for(
        self, printed: str, vendor: str | None = None, catalog: AcceleratorCatalog | None = None
    ) -> PartitionScheme | None:
        """The scheme of a card printing ``printed``: by its catalog name when the accelerator
        catalog knows it (so every alias the tools print resolves), else by the printed name.
        None: the model cannot be partitioned."""
        if catalog is not None:
            known = catalog.lookup(printed, vendor)
            if known is not None:
                found = self._by_name.get(normalise_model_name(known.name))
                if found is not None:
                    return found
        return self._by_name.get(normalise_model_name(printed))

    def profile_names(self) -> frozenset[str]:
        """Every profile name of every scheme."""
        return frozenset(p.name for s in self.schemes for p in s.profiles)


def load_partitions(path: str | Path | None = None) -> PartitionCatalog:
    """The packaged schemes (parsed once, cached), or those of ``path``. Raises
    :class:`CatalogFileError` naming file, entry and field when the file is malformed."""
    if path is None:
        return _packaged()
    return _parse(read_yaml(Path(path), str(path)), str(path))


@cache
def _packaged() -> PartitionCatalog:
    source = files("xpupool.catalog") / "data" / "partitions.yaml"
    return _parse(read_yaml(source, "partitions.yaml"), "partitions.yaml")


def _parse(document: object, label: str) -> PartitionCatalog:
    top = Entry(label, "", document, frozenset({"schemes"}))
    rows = top.raw("schemes")
    if not isinstance(rows, list) or not rows:
        raise top.error("schemes", "expected a non-empty list of schemes")
    schemes: list[PartitionScheme] = []
    owner: dict[str, int] = {}
    for index, row in enumerate(rows):
        scheme = _parse_scheme(label, index, row)
        for name in scheme.models:
            key = normalise_model_name(name)
            if owner.setdefault(key, index) != index:
                where = f"schemes[{index}]"
                raise CatalogFileError(
                    label, where, "models", f"{name!r} is in schemes[{owner[key]}]"
                )
        schemes.append(scheme)
    return PartitionCatalog(tuple(schemes))


def _positive(entry: Entry, field: str) -> int:
    value = entry.integer(field, nullable=False)
    assert value is not None
    return value


def _parse_scheme(label: str, index: int, row: object) -> PartitionScheme:
    entry = Entry(label, f"schemes[{index}]", row, _SCHEME_FIELDS)
    kind = entry.text("kind")
    if kind not in KINDS:
        raise entry.error("kind", f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    models = entry.text_list("models")
    if not models:
        raise entry.error("models", "expected at least one model")
    compute = _positive(entry, "compute_slices")
    positional = kind == "mig"
    memory_slices = _positive(entry, "memory_slices") if positional else 0
    memory_mib = 0 if positional else _positive(entry, "memory_mib")
    aicpu = _positive(entry, "aicpu") if entry.has("aicpu") else 0
    raw = entry.raw("profiles")
    if not isinstance(raw, list) or not raw:
        raise entry.error("profiles", "expected a non-empty list of profiles")
    profiles: list[PartitionProfile] = []
    for i, item in enumerate(raw):
        where = f"schemes[{index}].profiles[{i}]"
        p = Entry(label, where, item, _MIG_FIELDS if positional else _VNPU_FIELDS)
        if positional:
            profile = _mig_profile(p, compute, memory_slices)
        else:
            pcpu = _positive(p, "aicpu") if p.has("aicpu") else 0
            profile = PartitionProfile(
                p.text("name"), _positive(p, "compute"), _positive(p, "memory_mib"), aicpu=pcpu
            )
            if profile.memory_mib > memory_mib or profile.aicpu > aicpu > 0:
                raise p.error("memory_mib", "larger than the card's")
        if profile.compute > compute:
            raise p.error("compute", f"more than the card's {compute}")
        if any(q.name == profile.name for q in profiles):
            raise p.error("name", f"{profile.name!r} given twice")
        profiles.append(profile)
    return PartitionScheme(
        kind=kind,
        models=models,
        compute_slices=compute,
        memory_slices=memory_slices,
        memory_mib=memory_mib,
        aicpu=aicpu,
        profiles=tuple(profiles),
        source=entry.source(),
        section=entry.text("section"),
    )


def _mig_profile(p: Entry, compute: int, memory_slices: int) -> PartitionProfile:
    slices = _positive(p, "memory")
    starts = p.raw("starts")
    if (
        not isinstance(starts, list)
        or not starts
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in starts)
    ):
        raise p.error("starts", "expected a non-empty list of memory slice indexes")
    for start in starts:
        if start < 0 or start + slices > memory_slices:
            raise p.error(
                "starts", f"{start} + {slices} slices is outside the card's {memory_slices}"
            )
    gib = p.number("memory_gib", nullable=False)
    assert gib is not None
    read = _positive(p, "memory_mib") if p.has("memory_mib") else None
    if read is not None and read > gib * 1024:
        raise p.error("memory_mib", f"{read} MiB is more than the name's {gib:g} GiB")
    return PartitionProfile(
        name=p.text("name"),
        compute=_positive(p, "compute"),
        memory_mib=int(gib * 1024) if read is None else read,
        memory_slices=slices,
        starts=tuple(sorted(set(starts))),
        max_instances=_positive(p, "max_instances"),
    )


def check_profile(
    partitions: PartitionCatalog,
    accelerators: AcceleratorCatalog,
    models: tuple[str, ...],
    profile: str,
) -> None:
    """Refuse a partition request no named model can ever satisfy: :class:`RequestError` on
    ``devices.partition`` that names each model's profiles (or that it has none). ``models`` are
    the request's any-of names (a family names all its models); empty: any model, so some
    scheme must have the profile."""
    schemes: dict[str, PartitionScheme | None] = {}
    for name in models:
        known = accelerators.lookup(name)
        resolved = (known,) if known is not None else accelerators.by_family(name)
        for model in resolved:
            schemes[model.name] = partitions.scheme_for(model.name)
        if not resolved:
            schemes[name] = partitions.scheme_for(name)
    if not models:
        if any(s.profile(profile) for s in partitions.schemes):
            return
        known_names = ", ".join(sorted(partitions.profile_names()))
        raise RequestError(
            "devices.partition", profile, f"no partitionable model has it; known: {known_names}"
        )
    if any(s is not None and s.profile(profile) is not None for s in schemes.values()):
        return
    said = "; ".join(
        f"{name}: {', '.join(s.profile_names) if s else 'no partitions'}"
        for name, s in schemes.items()
    )
    raise RequestError("devices.partition", profile, f"the named models lack it ({said})")
