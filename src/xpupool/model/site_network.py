"""The network between sites and where named datasets live, as the operator's sites file gives them.

    links:
      - sites: [beijing, shanghai]   # a pair of node sites (the nodes' ``site`` label)
        bandwidth_gbps: 25           # Gbit/s, both ways
        latency_ms: 30
    datasets:
      imagenet: {size: 150Gi, sites: [beijing]}

The plane moves no data (issue 51): it only estimates how long a job's dataset would take to reach
a site, to weigh that against the wait it would save there (``engine/site_choice.py``). The
estimate is exact and plain: the dataset's size over the bottleneck bandwidth of the widest path
from the nearest site that holds it (0 where it is local); a site no path reaches cannot get the
data. Read as strictly as the rest of the file: a link naming one site twice, a pair given twice, a
bandwidth that is not positive, a dataset without sites or with a bad size are refused with a
:class:`RequestError` naming the path in the file (``links[0].bandwidth_gbps``). Model layer, so
the server's sites file and the simulator's read one definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from xpupool.model.errors import RequestError
from xpupool.model.quantity import MIB, parse_memory_mib
from xpupool.model.request import check_dataset_name, check_site_name
from xpupool.model.validation import field_error, request_error

__all__ = ["Dataset", "Link", "NetworkFile", "SiteNetwork", "Transfer", "parse_network"]

MAX_LINKS = 4096
MAX_DATASETS = 10_000
BITS_PER_GBIT = 1e9


class LinkSpec(BaseModel):
    """One link between two sites (the module docstring shows its keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sites: tuple[StrictStr, StrictStr] = Field(description="the two node sites it joins")
    bandwidth_gbps: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="Gbit/s")
    latency_ms: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False)

    @field_validator("sites")
    @classmethod
    def _pair(cls, value: tuple[str, str]) -> tuple[str, str]:
        for i, name in enumerate(value):
            check_site_name(f"sites[{i}]", name)
        if value[0] == value[1]:
            raise field_error("a link joins two different sites, not a site to itself", value)
        return value


class DatasetSpec(BaseModel):
    """One named dataset: its size (``150Gi``, binary units) and the sites that hold a copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: StrictStr | int
    sites: list[StrictStr] = Field(min_length=1, max_length=64)

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | int) -> str | int:
        try:
            mib = parse_memory_mib("size", value, "'150Gi' or '2Ti'")
        except RequestError as exc:
            raise field_error(exc.reason, value) from None
        if mib <= 0:
            raise field_error("a dataset's size is more than 0", value)
        return value

    @field_validator("sites")
    @classmethod
    def _sites(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            check_site_name(f"sites[{i}]", name)
        if len(set(value)) != len(value):
            raise field_error("a site is named twice", value)
        return value


class NetworkFile(BaseModel):
    """The ``links`` and ``datasets`` keys of a sites file (the other keys are the file's own)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    links: list[LinkSpec] = Field(default_factory=list, max_length=MAX_LINKS)
    datasets: dict[StrictStr, DatasetSpec] = Field(default_factory=dict, max_length=MAX_DATASETS)

    @field_validator("datasets")
    @classmethod
    def _names(cls, value: dict[str, DatasetSpec]) -> dict[str, DatasetSpec]:
        for name in value:
            try:
                check_dataset_name(name, name)
            except RequestError as exc:
                raise field_error(exc.reason, name, name) from None
        return value


@dataclass(frozen=True, slots=True)
class Link:
    a: str
    b: str
    bandwidth_gbps: float
    latency_ms: float


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    size_mib: int
    sites: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Transfer:
    """How ``dataset`` would reach a site: from ``source`` (None: no path reaches it), through a
    path whose narrowest link has ``bandwidth_gbps``, in ``seconds`` (0 when local; inf when no
    path)."""

    dataset: Dataset
    source: str | None
    bandwidth_gbps: float
    seconds: float

    @property
    def local(self) -> bool:
        return self.seconds == 0.0

    @property
    def gib(self) -> float:
        """GiB moved when the job runs there (0 when local)."""
        return 0.0 if self.local else self.dataset.size_mib / 1024


@dataclass(frozen=True, slots=True)
class SiteNetwork:
    """Links and datasets, with the widest-path bandwidth between every pair of sites computed
    once (a few dozen sites at most: Floyd-Warshall on bottlenecks)."""

    links: tuple[Link, ...] = ()
    datasets: Mapping[str, Dataset] = field(default_factory=dict)
    _widest: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def of(cls, links: tuple[Link, ...], datasets: Mapping[str, Dataset]) -> SiteNetwork:
        names = sorted({s for link in links for s in (link.a, link.b)})
        width: dict[tuple[str, str], float] = {}
        for link in links:
            width[(link.a, link.b)] = width[(link.b, link.a)] = link.bandwidth_gbps
        for k in names:
            for i in names:
                ik = width.get((i, k), 0.0)
                if not ik or i == k:
                    continue
                for j in names:
                    through = min(ik, width.get((k, j), 0.0))
                    if j != i and through > width.get((i, j), 0.0):
                        width[(i, j)] = through
        return cls(links, dict(datasets), width)

    def bandwidth_gbps(self, a: str, b: str) -> float:
        """The bottleneck bandwidth of the widest path from ``a`` to ``b`` (inf when a == b, 0
        when no path joins them)."""
        return math.inf if a == b else self._widest.get((a, b), 0.0)

    def span_text(self, sites: Sequence[str]) -> str:
        """What a job across ``sites`` (a gang that may span sites) talks over, for its events:
        the narrowest widest-path bandwidth between two of them, or the pair no link joins."""
        pairs = [(a, b) for i, a in enumerate(sites) for b in sites[i + 1 :]]
        if not pairs:
            return "one site"
        a, b = min(pairs, key=lambda p: self.bandwidth_gbps(*p))
        width = self.bandwidth_gbps(a, b)
        if not width:
            return f"no link known between {a} and {b}"
        return f"narrowest link {width:g} Gbit/s ({a} to {b})"

    def dataset(self, name: str) -> Dataset:
        """The dataset ``name``; raises :class:`RequestError` at ``data`` naming the known ones."""
        found = self.datasets.get(name)
        if found is None:
            known = ", ".join(sorted(self.datasets)) or "none: the sites file names no datasets"
            raise RequestError("data", name, f"unknown dataset; known: {known}")
        return found

    def transfer(self, name: str, site: str) -> Transfer:
        """How dataset ``name`` reaches ``site``: from the holder whose path is widest (the
        first in the dataset's order among equals); size / bandwidth, in seconds."""
        data = self.dataset(name)
        best, width = None, 0.0
        for holder in data.sites:
            w = self.bandwidth_gbps(holder, site)
            if w > width:
                best, width = holder, w
        if best is None:
            return Transfer(data, None, 0.0, math.inf)
        if width == math.inf:
            return Transfer(data, best, width, 0.0)
        seconds = data.size_mib * MIB * 8 / (width * BITS_PER_GBIT)
        return Transfer(data, best, width, seconds)


def parse_network(data: object, root: str = "") -> SiteNetwork:
    """The links and datasets of a parsed sites file (a mapping; other keys ignored). Raises
    :class:`RequestError` naming the path in the file."""
    if data is None:
        return SiteNetwork()
    try:
        parsed = NetworkFile.model_validate(data)
    except ValidationError as exc:
        raise request_error(exc, root or "sites file") from None
    links: list[Link] = []
    seen: set[frozenset[str]] = set()
    for i, spec in enumerate(parsed.links):
        pair = frozenset(spec.sites)
        if pair in seen:
            raise RequestError(f"links[{i}].sites", list(spec.sites), "this pair is given twice")
        seen.add(pair)
        links.append(Link(*spec.sites, spec.bandwidth_gbps, spec.latency_ms))
    datasets = {
        name: Dataset(name, parse_memory_mib("size", spec.size), tuple(spec.sites))
        for name, spec in parsed.datasets.items()
    }
    return SiteNetwork.of(tuple(links), datasets)
