"""Nodes and sites (``/v1/nodes``, ``/v1/sites``): a node as the API shows it, its taints in
Kubernetes' shape and the changes made to them, and the answer to a node's deletion.

The agent protocol imports this module (a registration carries taints, and its answer is a
:class:`Node`), so it imports nothing of the package but the base.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, PrivateAttr, model_validator

from xpupool.model.errors import RequestError
from xpupool.model.taint import Taint, read_taint
from xpupool.model.validation import field_error
from xpupool.server.schemas.base import Lenient, Strict

MAX_TAINTS = 64  # per node: Kubernetes sets no bound, a pool needs a handful


class TaintIn(Strict):
    """A node taint in Kubernetes' shape (``Node.spec.taints[i]``, without ``timeAdded``)."""

    key: str = Field(
        max_length=317,
        description="A qualified name: 'gpu', or with a DNS prefix 'example.com/gpu'.",
    )
    value: str = Field(
        "",
        max_length=63,
        description="Letters, digits, '-', '_', '.'; empty (the default): the key alone.",
    )
    effect: str = Field(
        description="'NoSchedule': no work that does not tolerate it lands on the node; "
        "'PreferNoSchedule': other nodes are preferred. 'NoExecute' is refused (xpupool never "
        "evicts running work for a taint).",
        json_schema_extra={"enum": ["NoSchedule", "PreferNoSchedule"]},
    )
    _taint: Taint | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> TaintIn:
        try:
            self._taint = read_taint(
                "", {"key": self.key, "value": self.value, "effect": self.effect}
            )
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field.lstrip(".")) from None
        return self

    def to_taint(self) -> Taint:
        if self._taint is None:  # built with model_construct: already valid
            self._taint = Taint(self.key, self.value, self.effect)  # type: ignore[arg-type]
        return self._taint

    @classmethod
    def from_taint(cls, t: Taint) -> TaintIn:
        made = cls.model_construct(key=t.key, value=t.value, effect=t.effect.value)
        made._taint = t
        return made


class TaintView(Lenient):
    """A node taint as the API shows it (Kubernetes' shape)."""

    key: str
    value: str = Field("", description="Empty: the key alone.")
    effect: str = Field(description="'NoSchedule' or 'PreferNoSchedule'.")


class TaintKeyIn(Strict):
    """Taints to take off a node: those with this key and effect, or with this key and any
    effect when ``effect`` is null (``kubectl taint NODE key:Effect-`` and ``key-``)."""

    key: str = Field(max_length=317)
    effect: str | None = Field(
        None, description="'NoSchedule' or 'PreferNoSchedule'; null: every effect of the key."
    )


class NodeTaintsIn(Strict):
    """A change to a node's taints, all or nothing, as ``kubectl taint`` makes one: ``remove``
    takes taints off (each must match one), ``add`` puts taints on; a taint with the key and
    effect of one the node has replaces it only with ``overwrite`` (else 409)."""

    add: list[TaintIn] = Field(default_factory=list, max_length=MAX_TAINTS)
    remove: list[TaintKeyIn] = Field(default_factory=list, max_length=MAX_TAINTS)
    overwrite: bool = Field(
        False, description="Let an added taint replace the value of one with its key and effect."
    )


class NodeStatus(StrEnum):
    READY = "ready"
    LOST = "lost"


class Node(Lenient):
    name: str
    site: str
    status: NodeStatus
    schedulable: bool
    source: str = Field(
        description="'agent' (registered by a node agent) or 'cluster' (simulated)."
    )
    cpu_milli: int
    memory_mib: int
    cpu_allocated_milli: int
    memory_allocated_mib: int
    labels: dict[str, str]
    arch: str
    os: str
    devices: int
    devices_free: int = Field(description="Devices with nothing allocated on them.")
    last_heartbeat: float | None
    runtime: str | None = Field(
        None, description="Container runtime for image jobs ('docker', 'podman'); null = none."
    )
    taints: list[TaintView] = Field(
        default_factory=list,
        description="Taints: work that does not tolerate a NoSchedule one is not placed here; "
        "PreferNoSchedule ones make other nodes preferred.",
    )
    deleting: bool = Field(
        False,
        description="Cordoned for deletion (DELETE /v1/nodes/NAME?drain=true): removed when its "
        "last allocation ends; uncordoning it cancels the deletion.",
    )
    link_domain: str | None = Field(
        None,
        description="The part of its site whose nodes share a fast network (the value of the "
        "site's link_domain_label on this node, docs/sites.md): a gang is kept to one. Null: "
        "the site names no label, or this node lacks it (the site-wide domain).",
    )


class NodeDeletion(Lenient):
    """The answer to ``DELETE /v1/nodes/{name}``."""

    name: str
    deleted: bool = Field(
        description="True: the node is gone (engine and store). False: a drain, the node is "
        "cordoned and is removed when the allocations in ``waiting_for`` end."
    )
    waiting_for: list[str] = Field(
        default_factory=list,
        description="What a drain waits for, one 'allocation 3 (job 7)' each; empty when deleted.",
    )
    tokens_revoked: list[int] = Field(
        default_factory=list,
        description="Ids of the agent (and bootstrap) tokens bound to the node, revoked by the "
        "deletion; empty while a drain waits (they are revoked when the node is removed).",
    )
    note: str = Field(
        "",
        description="What happens next: a cluster-file node is registered again from the file "
        "by the next `xpupool up --cluster FILE`; an agent node only with a new token.",
    )


class SiteDomain(Lenient):
    """One link domain of a site (``GET /v1/sites``): its nodes and cards."""

    name: str | None = Field(
        description="The value of the site's link_domain_label; null: the site's nodes without "
        "one (the whole site, where it names no label)."
    )
    nodes: int
    devices: int
    devices_free: int = Field(description="Devices of schedulable nodes with nothing allocated.")


class Site(Lenient):
    name: str
    nodes: int
    nodes_ready: int
    devices: int
    devices_free: int
    by_model: dict[str, int]
    reachable: bool = Field(
        True,
        description="False: every node of it is an agent's and lost, in a pool of several sites "
        "(docs/sites.md, sites that stop answering), as of the last round of the lost-node watch.",
    )
    drained: bool = Field(False, description="Every node of it is cordoned (xpupool site drain).")
    kind: str = Field(
        "agents",
        description="'kubernetes' (a cluster the plane manages) or 'agents' (xpupool agents and "
        "the cluster file's simulated nodes).",
    )
    last_contact: float | None = Field(
        None, description="Unix time the plane last heard from any node of it; null: never."
    )
    devices_allocated: int = Field(0, description="Devices with something allocated on them.")
    pending: int = Field(
        0, description="Pending jobs the plane dispatched to it (docs/sites.md, choosing a site)."
    )
    domains: list[SiteDomain] = Field(
        default_factory=list,
        description="Its link domains by name (null last), where a gang is kept to one: one "
        "entry named null for a site that names no link_domain_label.",
    )
