"""The sites file of ``xpupool up --sites FILE``: the Kubernetes clusters the plane manages as
sites, beside its agent pool, in the order a job naming no site is offered them.

    sites:
      - name: gpu-a                  # the registry's name of the site; its nodes' site label
        kind: kubernetes
        kubeconfig: gpu-a.kubeconfig # relative to this file; in_cluster: true instead, or
        # kubeconfig_secret: gpu-a     # the admin's own secret of that name holds the kubeconfig
        context: admin@gpu-a         # optional: the kubeconfig's current context otherwise
        scheduler_name: xpupool-scheduler  # the cluster's profile with xpupool's extender
        namespace_prefix: xpupool-   # a tenant's namespace: prefix + tenant name
        namespaces: {ml-team: research}    # optional fixed mapping, wins over the prefix
        create_namespaces: false     # the plane creates a tenant's namespace when missing
        finished_pods_retention_s: 300  # a finished job's pods kept so long (0: deleted at once)
        link_domain_label: topology.kubernetes.io/zone  # optional: a gang stays in one value
        node_metrics:                # optional: read each node agent's card power (node_power.py)
          service: xpupool/xpupool-node-agent-metrics  # NAMESPACE/NAME of the agents' Service:
          port: metrics              # each node's agent is its ready endpoint in the Service's
                                     # EndpointSlices, on this port (name or number; the chart's)
          # url: http://{node}:9400/metrics  # instead of service: {node}, the node's name (the
                                     # default without service; needs a hostPort or node DNS)
          token_file: metrics.token  # or token_secret: NAME (the admin's secret); the chart's
                                     # metricsToken; neither: scraped without a token
          every_s: 30                # a round of every node's scrape this often
          timeout_s: 5               # one node's scrape at most this long
          in_flight: 16              # nodes scraped at once
    links:                           # optional: between node sites (model/site_network.py)
      - {sites: [gpu-a, agents-bj], bandwidth_gbps: 25, latency_ms: 30}
    datasets:                        # optional: where named datasets live
      imagenet: {size: 150Gi, sites: [gpu-a]}
    agents:                          # optional: the agent pool's settings
      link_domain_label: rack        # as a site's, from the labels agents register

Read as strictly as every other file the operator gives: unknown keys, a bad name, two sites of
one name, a kubeconfig that is not a file are refused with a :class:`RequestError` naming the
path inside the file (``sites[0].scheduler_name``), before anything starts. A
``kubeconfig_secret`` is read from the plane's secret store as the site is attached (the store
is open then, not while the file is read): one missing or not a kubeconfig is refused then, naming
the site and the field (``k8s/site/credentials.py``).
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from xpupool.model.errors import RequestError
from xpupool.model.site_network import (
    MAX_DATASETS,
    MAX_LINKS,
    DatasetSpec,
    LinkSpec,
    SiteNetwork,
    parse_network,
)
from xpupool.model.taint import check_key
from xpupool.model.validation import request_error
from xpupool.server.schemas.base import NAME_PATTERN

__all__ = [
    "AgentPoolConfig",
    "KubernetesSiteConfig",
    "NodeMetricsConfig",
    "SitesFile",
    "load_agent_pool",
    "load_site_network",
    "load_sites",
    "parse_sites",
]

# A DNS-1123 label: what a namespace, and the site's name as a label value, may be.
DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_SITE_NAME = r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$"
MAX_SITES = 64
MAX_RETENTION_S = 7 * 24 * 3600  # a week: what is kept longer is the cluster's own business
DEFAULT_URL = "http://{node}:9400/metrics"  # reached only with a hostPort or per-node DNS
DEFAULT_PORT = "metrics"  # the port's name in the chart's agent Service
# a port's name as Kubernetes takes it (IANA_SVC_NAME): a letter among them, no "--"
_PORT_NAME = r"^(?=.*[a-z])(?!.*--)[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$"


def _label_name(value: str | None) -> str | None:
    """A node label's name as Kubernetes takes it (a qualified name), or None."""
    if value is not None:
        try:
            check_key("link_domain_label", value)
        except RequestError as exc:
            raise ValueError(f"a node label's name: {exc.reason}") from None
    return value


class AgentPoolConfig(BaseModel):
    """The agent pool's settings (``agents:``): ``link_domain_label`` as a site's, read from the
    labels agents register (``xpupool agent --label``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    link_domain_label: str | None = Field(default=None, max_length=317)

    @field_validator("link_domain_label")
    @classmethod
    def _link_domain_label(cls, value: str | None) -> str | None:
        return _label_name(value)


class NodeMetricsConfig(BaseModel):
    """Where the plane reads the site's node agents' metrics (``node_metrics:``), for the cards'
    power samples (``node_power.py``): the agents' Service, whose EndpointSlices name each
    node's agent pod (the chart's headless Service; ``agent_endpoints.py``), or a URL template
    with the node's name; and its bearer token (the chart's ``metricsToken`` Secret's value, as
    a file or the admin's secret in the plane's store). ``service`` and an explicit ``url`` are
    refused together: neither silently wins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: :data:`DEFAULT_URL`, unless ``service`` is given (then the two are refused together)
    url: str | None = Field(default=None, min_length=8, max_length=500)
    # NAMESPACE/NAME of the agents' Service: each node's agent is the ready endpoint on it in
    # the Service's EndpointSlices (agent_endpoints.py), at ``port`` (a port's name or number)
    service: str | None = Field(default=None, max_length=127)
    port: int | str | None = None
    token_file: Path | None = None
    token_secret: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=63)
    every_s: float = Field(default=30.0, ge=1, le=3600, allow_inf_nan=False)
    timeout_s: float = Field(default=5.0, gt=0, le=60, allow_inf_nan=False)
    in_flight: int = Field(default=16, ge=1, le=256)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL")
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as exc:
            raise ValueError(f"a URL with {{node}} in it: {exc}") from None
        if fields - {"node"}:
            raise ValueError(f"{{node}} is the one placeholder, not {sorted(fields - {'node'})}")
        return value

    @field_validator("service")
    @classmethod
    def _service(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if info.data.get("url") is not None:
            raise ValueError("give url or service, not both")
        namespace, slash, name = value.partition("/")
        if not slash or not re.fullmatch(DNS_LABEL, namespace) or not re.fullmatch(DNS_LABEL, name):
            raise ValueError("NAMESPACE/NAME of a Service, each a DNS label")
        return value

    @field_validator("port", mode="before")
    @classmethod
    def _port(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return value
        if info.data.get("service") is None:
            raise ValueError("a port of the service: give service")
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError("a port's number or its name")
        if isinstance(value, int) and not 1 <= value <= 65535:
            raise ValueError("a port's number of 1..65535 or its name")
        if isinstance(value, str) and not re.fullmatch(_PORT_NAME, value):
            raise ValueError("a port's name (up to 15 of a-z, 0-9, '-', a letter among them)")
        return value

    @model_validator(mode="after")
    def _one_token(self) -> NodeMetricsConfig:
        if self.token_file is not None and self.token_secret is not None:
            raise ValueError("give at most one of token_file, token_secret")
        return self

    def url_of(self, node: str) -> str:
        """The URL template's for ``node`` (without ``service``)."""
        return (self.url or DEFAULT_URL).format(node=node)

    def service_port(self) -> tuple[str, str, str | int] | None:
        """(namespace, name, port) of the agents' Service, or None: the URL template."""
        if self.service is None:
            return None
        namespace, _, name = self.service.partition("/")
        return namespace, name, DEFAULT_PORT if self.port is None else self.port


class KubernetesSiteConfig(BaseModel):
    """One Kubernetes cluster managed as a site (the module docstring shows every key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_SITE_NAME)
    kind: Literal["kubernetes"] = "kubernetes"
    kubeconfig: Path | None = None
    kubeconfig_secret: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=63)
    in_cluster: bool = False
    context: str | None = Field(default=None, min_length=1, max_length=253)
    scheduler_name: str = Field(default="xpupool-scheduler", pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$")
    namespace_prefix: str = Field(default="xpupool-", pattern=r"^[a-z0-9]([a-z0-9-]{0,30})?$")
    namespaces: dict[str, str] = Field(default_factory=dict, max_length=10_000)
    create_namespaces: bool = False
    finished_pods_retention_s: float = Field(
        default=300.0, ge=0, le=MAX_RETENTION_S, strict=True, allow_inf_nan=False
    )
    # the node label whose value is a node's link domain: a gang is kept to one (a zone, a
    # network block; engine/link_domains.py); None: the site is one domain
    link_domain_label: str | None = Field(default=None, max_length=317)
    # the node agents' metrics, read for the cards' power samples; None: energy is modelled
    node_metrics: NodeMetricsConfig | None = None

    @field_validator("link_domain_label")
    @classmethod
    def _link_domain_label(cls, value: str | None) -> str | None:
        return _label_name(value)

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: dict[str, str]) -> dict[str, str]:
        for tenant, namespace in value.items():
            if not re.fullmatch(DNS_LABEL, namespace):
                raise ValueError(f"{tenant}: {namespace!r} is not a namespace name (DNS label)")
        return value

    @model_validator(mode="after")
    def _credentials(self) -> KubernetesSiteConfig:
        given = (
            (self.kubeconfig is not None) + (self.kubeconfig_secret is not None) + self.in_cluster
        )
        if given != 1:
            raise ValueError("give one of kubeconfig, kubeconfig_secret, or in_cluster: true")
        return self

    def namespace(self, tenant: str) -> str:
        """The namespace ``tenant``'s pods go to. Raises :class:`RequestError` naming the tenant
        when the prefix's form is no namespace name (a tenant name with ``.`` or ``_``)."""
        name = self.namespaces.get(tenant, f"{self.namespace_prefix}{tenant}")
        if not re.fullmatch(DNS_LABEL, name):
            why = f"{name!r} is not a namespace name: map the tenant in the sites file's namespaces"
            raise RequestError("tenant", tenant, f"site {self.name}: {why}")
        return name


class SitesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sites: list[KubernetesSiteConfig] = Field(max_length=MAX_SITES)
    agents: AgentPoolConfig = Field(default_factory=AgentPoolConfig)
    links: list[LinkSpec] = Field(default_factory=list, max_length=MAX_LINKS)
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict, max_length=MAX_DATASETS)

    @model_validator(mode="after")
    def _unique(self) -> SitesFile:
        seen: set[str] = set()
        for site in self.sites:
            if site.name in seen:
                raise ValueError(f"two sites named {site.name!r}")
            seen.add(site.name)
        return self


def parse_sites(data: object, base: Path | None = None) -> list[KubernetesSiteConfig]:
    """The sites of a parsed file; relative kubeconfig paths are taken from ``base`` (the file's
    folder) and must be files. Raises :class:`RequestError` naming the path in the file."""
    try:
        parsed = SitesFile.model_validate(data)
    except ValidationError as exc:
        raise request_error(exc, "sites") from None
    parse_network(data)  # the links' and datasets' own rules (a pair given twice, ...)
    out: list[KubernetesSiteConfig] = []
    for i, site in enumerate(parsed.sites):
        if site.name == "agents":
            raise RequestError(f"sites[{i}].name", site.name, "the agent pool's name")
        if site.kubeconfig is not None:
            path = site.kubeconfig if base is None else base / site.kubeconfig
            if not path.is_file():
                raise RequestError(f"sites[{i}].kubeconfig", str(path), "no such file")
            site = site.model_copy(update={"kubeconfig": path.resolve()})
        metrics = site.node_metrics
        if metrics is not None and metrics.token_file is not None:
            path = metrics.token_file if base is None else base / metrics.token_file
            if not path.is_file():
                raise RequestError(f"sites[{i}].node_metrics.token_file", str(path), "no such file")
            metrics = metrics.model_copy(update={"token_file": path.resolve()})
            site = site.model_copy(update={"node_metrics": metrics})
        out.append(site)
    return out


def load_sites(path: str | Path) -> list[KubernetesSiteConfig]:
    """The sites of the YAML file at ``path``; YAML errors name the file."""
    path = Path(path)
    return parse_sites(_read(path), path.parent)


def load_agent_pool(path: str | Path) -> AgentPoolConfig:
    """The agent pool's settings in the sites file at ``path`` (the defaults without them);
    checked as :func:`load_sites` checks the file."""
    try:
        return SitesFile.model_validate(_read(Path(path))).agents
    except ValidationError as exc:
        raise request_error(exc, "sites") from None


def load_site_network(path: str | Path) -> SiteNetwork:
    """The links and datasets of the sites file at ``path`` (empty without them)."""
    return parse_network(_read(Path(path)))


def _read(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RequestError(str(path), "", f"not valid YAML: {exc}") from None
    except OSError as exc:
        raise RequestError(str(path), "", f"cannot be read: {exc.strerror}") from None
