"""Sites in a timed replay: the trace's nodes split into sites, tasks reading datasets, and a rule
that sends each arriving task to one site, so that ``xpupool simulate --mode timed --sites FILE``
runs the server's site choice (``engine/site_choice.py``) beside two plain rules.

    sites:                       # a site takes the nodes whose GPU model it lists ([]: the rest)
      - {name: beijing, models: [V100M16, V100M32], nodes_per_domain: 32}   # link domains
      - {name: shanghai, models: [T4, P100]}
      - {name: shenzhen, models: []}
    links: [{sites: [beijing, shanghai], bandwidth_gbps: 25}]    # model/site_network.py
    datasets: {imagenet: {size: 150Gi, sites: [beijing]}}
    data: {share: 0.5}           # the share of tasks that read a dataset (each drawn by seed)

A model listed by several sites has its nodes dealt among them in turn. A site giving
``nodes_per_domain`` is split into link domains (``engine/link_domains.py``) of that many nodes in
the order it was dealt them (``d0``, ``d1``...; the last may be smaller), as a server's site
naming a ``link_domain_label``: the engine then keeps a gang (an elastic task's minimum) within
one domain there, as it does on the plane. Every task is dispatched
once, at arrival, as a multi-cluster manager dispatches (MultiKueue): ``xpupool`` ranks the sites
by the engine's what-ifs, data transfer and the expected wait (``SiteChooser``);
``least-loaded`` takes the site whose cards are least allocated; ``random`` any site. All three
choose among the same sites, those that could ever hold the task and its data can reach. A task
sent away from its data cannot start before the data arrives (arrival + transfer): it waits for it
in the queue, or holds its cards while it copies, and the wait counts either. ``GiB moved`` adds
the dataset's size for every task run away from it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from xpupool.engine import Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.fragmentation.measure import ShapeKey, shape_key
from xpupool.engine.gang_sites import within_sites
from xpupool.engine.site_choice import RunTimes, SiteChooser, SiteOption
from xpupool.model import Node, Request
from xpupool.model.errors import RequestError
from xpupool.model.site_network import LinkSpec, SiteNetwork, parse_network
from xpupool.model.validation import request_error

RULES = ("xpupool", "least-loaded", "random")


class _SiteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr
    models: list[StrictStr] = Field(default_factory=list)
    nodes_per_domain: int | None = Field(default=None, ge=1, le=1_000_000)


class _DataSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    share: float = Field(default=0.0, ge=0.0, le=1.0)


class _SimSitesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sites: list[_SiteSpec] = Field(min_length=2, max_length=64)
    links: list[LinkSpec] = Field(default_factory=list)
    datasets: dict[StrictStr, object] = Field(default_factory=dict)
    data: _DataSpec = Field(default_factory=_DataSpec)


@dataclass(frozen=True, slots=True)
class SimSites:
    """A parsed sites file of the simulator (the module docstring shows its keys)."""

    sites: tuple[tuple[str, tuple[str, ...]], ...]  # (name, GPU models; () = the rest)
    network: SiteNetwork
    data_share: float
    # site -> nodes per link domain, for the sites split into domains (none: one domain each)
    domain_nodes: tuple[tuple[str, int], ...] = ()

    def split(self, nodes: Sequence[Node]) -> list[Node]:
        """``nodes`` with their sites set: by GPU model, dealt in turn among the sites listing it;
        a model no site lists goes to the sites listing none (the first site when none does).
        In a site of ``nodes_per_domain`` N, its k-th node (in the order of ``nodes``) is in link
        domain ``d{k // N}``."""
        rest = [name for name, models in self.sites if not models] or [self.sites[0][0]]
        per_domain = dict(self.domain_nodes)
        dealt: Counter[str] = Counter()
        held: Counter[str] = Counter()  # nodes each site has taken so far
        out: list[Node] = []
        for node in nodes:
            model = node.devices[0].model if node.devices else ""
            takers = [name for name, models in self.sites if model in models] or rest
            site = takers[dealt[model] % len(takers)]
            dealt[model] += 1
            size = per_domain.get(site)
            domain = None if size is None else f"d{held[site] // size}"
            held[site] += 1
            out.append(replace(node, site=site, link_domain=domain))
        return out

    def datasets_of(self, count: int, seed: int) -> list[str | None]:
        """Per task, the dataset it reads (None: none): ``data.share`` of them, each dataset
        equally likely, drawn with ``seed``."""
        names = sorted(self.network.datasets)
        rng = random.Random(seed)
        return [
            rng.choice(names) if names and rng.random() < self.data_share else None
            for _ in range(count)
        ]


def parse_sim_sites(data: object) -> SimSites:
    """Raises :class:`RequestError` naming the path in the file."""
    try:
        parsed = _SimSitesFile.model_validate(data)
    except ValidationError as exc:
        raise request_error(exc, "sites file") from None
    network = parse_network(data)
    names = [s.name for s in parsed.sites]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise RequestError(f"sites[{i}].name", name, "two sites of this name")
    for name, dataset in network.datasets.items():
        for site in dataset.sites:
            if site not in names:
                raise RequestError(f"datasets.{name}.sites", site, f"not a site: {names}")
    sites = tuple((s.name, tuple(s.models)) for s in parsed.sites)
    domains = tuple(
        (s.name, s.nodes_per_domain) for s in parsed.sites if s.nodes_per_domain is not None
    )
    return SimSites(sites, network, parsed.data.share, domains)


def load_sim_sites(path: str | Path) -> SimSites:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RequestError(str(path), "", f"cannot be read as YAML: {exc}") from None
    return parse_sim_sites(data)


class Dispatch:
    """Sends each arriving task to one site by ``rule`` and keeps what the rule learns: the jobs
    of each shape queued per site (for the wait estimator) and the run time per shape."""

    def __init__(
        self,
        engine: Engine,
        sites: SimSites,
        rule: str,
        workload: TargetWorkload | None,
        seed: int,
        datasets: Sequence[str | None] = (),
    ) -> None:
        if rule not in RULES:
            raise RequestError("sites rule", rule, f"known: {', '.join(RULES)}")
        self.rule = rule
        self.datasets = datasets  # per task index (``SimSites.datasets_of``)
        self.times = RunTimes()
        self.chooser = SiteChooser(engine, sites.network, self.times, workload)
        self.chooser.warm()
        self._rng = random.Random(seed)
        self._queued: Counter[tuple[str, ShapeKey]] = Counter()
        self._where: dict[int, tuple[str, ShapeKey]] = {}
        self.gib_moved = 0.0

    def arrive(self, index: int, req: Request) -> tuple[Request, float]:
        """``req`` kept to the site its rule chose, and the seconds its data takes to get there
        (0: local or no dataset). A task no site could hold is left as it is."""
        if index < len(self.datasets) and self.datasets[index] is not None:
            req = replace(req, data=self.datasets[index])
        shape = shape_key(req)
        queued = {site: n for (site, key), n in self._queued.items() if key == shape}
        choice = self.chooser.choose(req, queued)
        if choice is None:
            return req, 0.0
        picked: SiteOption
        if self.rule == "xpupool":
            picked = choice.chosen
        elif self.rule == "least-loaded":
            picked = min(choice.options, key=lambda o: o.load)
        else:
            picked = self._rng.choice(choice.options)
        self.gib_moved += 0.0 if picked.transfer is None else picked.transfer.gib
        self._where[index] = (picked.site, shape)
        self._queued[(picked.site, shape)] += 1
        return within_sites(req, (picked.site,)), picked.transfer_s

    def started(self, index: int) -> None:
        where = self._where.pop(index, None)
        if where is not None:
            self._queued[where] -= 1

    def finished(self, req: Request, seconds: float) -> None:
        self.times.record(req, seconds)
