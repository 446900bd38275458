"""The agent protocol: everything a node agent sends the server and receives from it, and nothing
else. An agent registers its node (:class:`NodeIn`, answered with :class:`Registered`), then
heartbeats (:class:`Heartbeat`: its cards' readings and a :class:`ReplicaReport` per replica it was
given), and each answer (:class:`HeartbeatReply`) hands it the :class:`Work` to start and the
replicas to stop. :class:`ReplicaState` names a replica's states, shared by the agent that reports
them and the server that reads them.

``xpupool.agent`` imports this module and no other of the package, so that what an agent loads is
the protocol, not the API's tenants, queues, jobs and overview. It imports the base, and the node
types the protocol carries: a registration's taints (:class:`TaintIn`, re-exported here for the
agent) and its answer, a :class:`Node`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, StrictInt, model_validator

from xpupool.model.device import Device as DeviceRecord
from xpupool.model.errors import RequestError
from xpupool.model.progress import MAX_RATE
from xpupool.model.taint import check_taints
from xpupool.model.validation import field_error
from xpupool.server.schemas.base import Lenient, LenientIn, Name, Strict
from xpupool.server.schemas.nodes import MAX_TAINTS, Node
from xpupool.server.schemas.nodes import TaintIn as TaintIn  # re-exported: the agent builds them

MAX_REPLICA_PORTS = 16  # an agent gives a replica one port today (agent/launch/ports.py)
MAX_STARTING_REPORTS = 256  # replicas a node is starting at once, at most, in one heartbeat
MAX_STEP_CHARS = (
    1024  # a start's step: an image reference (500 at most) and a few words; the agent clips
)
Port = Annotated[StrictInt, Field(ge=1, le=65535)]  # a number, never "29500"
PullPolicy = Literal["if-not-present", "always", "never"]
"""When the agent pulls a job's image (Kubernetes' imagePullPolicy; agent/launch/container_pull.py):
only when the node lacks it (the default), before every run, or never (it must be there)."""

AGENT_PROTOCOL = 2
"""The agent protocol's version: agents send it in ``AGENT_PROTOCOL_HEADER``; the server refuses
any other with 426. 1 was the protocol before node-bound credentials (no header)."""
AGENT_PROTOCOL_HEADER = "X-Xpupool-Agent-Protocol"
BOOTSTRAP_TOKEN_PREFIX = "xpb_"
"""Bootstrap tokens start with this (others with ``xpp_``), so an agent knows it holds one."""
ADDRESS_LABEL = "xpupool/address"
# the host ports an agent gives image replicas, FIRST-LAST (agent/launch/ports.py)
PORTS_LABEL = "xpupool/ports"
"""The node label an agent registers its address under (``xpupool agent --address``): where a
job's other replicas reach it (``services/replica_env.py``)."""


class DeviceIn(Strict):
    """A device as an agent reports it and as the store keeps it: the one wire form of the
    engine's :class:`~xpupool.model.device.Device`. A probe's record (``probes.base.DeviceInfo``,
    with its live metrics) becomes a Device in ``DeviceInfo.to_device``; :meth:`from_device` and
    :meth:`to_device` are the only conversions between this form and the engine's."""

    uuid: str = Field(min_length=1, max_length=200)
    vendor: str = Field(
        min_length=1, max_length=40, description="Vendor key or alias ('nvidia', 'ascend')."
    )
    model: str = Field(min_length=1, max_length=200, description="As the vendor tool prints it.")
    memory_mib: int = Field(gt=0, le=1 << 30, description="Device memory, MiB.")
    index: int = Field(0, ge=0, le=4096, description="The vendor tool's index on the host.")
    compute_units: int = Field(0, ge=0, le=1 << 20, description="SMs, AI cores...; 0 = unknown.")
    driver_version: str | None = Field(None, max_length=100)
    runtimes: dict[str, str] = Field(
        default_factory=dict, description="Highest runtime versions served: {'cuda': '12.4'}."
    )
    numa_node: int | None = Field(None, ge=0, le=4096)
    link_group: str | None = Field(
        None, max_length=200, description="Fast-link domain on the node; null = PCIe only."
    )
    healthy: bool = True
    max_tasks: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="The most tasks (device shares) that may share this card at once (HAMi's "
        "deviceSplitCount); null = no limit.",
    )
    memory_overcommit: float = Field(
        default=1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="Over-commit factor of the card's memory: at most floor(memory_mib x factor) "
        "MiB is granted to jobs. 1.0 (the default): none.",
    )
    cores_overcommit: float = Field(
        default=1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="Over-commit factor of the card's compute: at most floor(1000 x factor) "
        "thousandths are granted to jobs. 1.0 (the default): none.",
    )
    partition: str | None = Field(
        None,
        max_length=40,
        description="The hardware partition profile this device is ('3g.40gb', a MIG instance; "
        "'vir05_1c_16g', an Ascend vNPU); null = a card, not a partition.",
    )
    partition_of: str | None = Field(
        None, max_length=200, description="The UUID of the card the partition was cut from."
    )
    partition_start: int | None = Field(
        None, ge=0, le=64, description="MIG: the first memory slice it occupies; null for vNPU."
    )

    def to_device(self) -> DeviceRecord:
        """The engine's record; raises ``RequestError`` for a vendor no alias names."""
        return DeviceRecord(**self.model_dump())

    @classmethod
    def from_device(cls, d: DeviceRecord) -> DeviceIn:
        """The wire form of an engine record (already valid: not checked again)."""
        return cls.model_construct(
            uuid=d.uuid,
            vendor=d.vendor,
            model=d.model,
            memory_mib=d.memory_mib,
            index=d.index,
            compute_units=d.compute_units,
            driver_version=d.driver_version,
            runtimes=dict(d.runtimes),
            numa_node=d.numa_node,
            link_group=d.link_group,
            healthy=d.healthy,
            max_tasks=d.max_tasks,
            memory_overcommit=d.memory_overcommit,
            cores_overcommit=d.cores_overcommit,
            partition=d.partition,
            partition_of=d.partition_of,
            partition_start=d.partition_start,
        )


class NodeIn(Strict):
    """A node as an agent registers it."""

    name: Name
    site: Name = "default"
    cpu_milli: int = Field(ge=0, le=1 << 40, description="CPU capacity, millicores.")
    memory_mib: int = Field(ge=0, le=1 << 50, description="Host memory, MiB.")
    labels: dict[str, str] = Field(default_factory=dict)
    arch: str = Field("", max_length=40)
    os: str = Field("", max_length=200)
    devices: list[DeviceIn] = Field(default_factory=list, max_length=256)
    runtime: Literal["docker", "podman"] | None = Field(
        None,
        description="The container runtime the agent found by asking it (docker info, podman "
        "info); null = none: the node runs no container images, and image jobs go elsewhere.",
    )
    taints: list[TaintIn] = Field(
        default_factory=list,
        max_length=MAX_TAINTS,
        description="Taints the node registers with (the agent's --taint), taken when the node "
        "is first registered, as kubelet's --register-with-taints: afterwards the server's "
        "(changed with POST /v1/nodes/NAME/taints) stand, whatever a registration says.",
    )
    drain: bool = Field(
        False,
        description="When the new inventory would take a device (or CPU, memory) that live "
        "allocations hold: false refuses the registration (409, naming them; nothing changes); "
        "true cordons what is in the way at once and applies the change when its last "
        "allocation ends.",
    )

    @model_validator(mode="after")
    def _unique_uuids(self) -> NodeIn:
        seen: set[str] = set()
        for i, d in enumerate(self.devices):
            if d.uuid in seen:
                raise ValueError(f"devices[{i}].uuid: duplicate UUID {d.uuid!r}")
            seen.add(d.uuid)
        try:
            check_taints("taints", [t.to_taint() for t in self.taints])
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field) from None
        return self


class DeviceMetrics(Lenient):
    """Live readings; a field the probe cannot read is null (shown as absent, never as zero)."""

    uuid: str
    memory_used_mib: int | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    healthy: bool | None = None
    # why: unhealthy, or healthy with a warning ("xid-13: ..."); "" or null: nothing to say
    health_cause: str | None = Field(None, max_length=300)


class ReplicaState(StrEnum):
    """Where a replica the agent was given is: running, or ended one of three ways. A str enum,
    so the wire carries the same words as before it existed."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"  # its process exited 0
    FAILED = "failed"  # it exited non-zero, or could not be started
    STOPPED = "stopped"  # it was stopped (asked to, or its lease ran out) or never started


FINAL_REPLICA_STATES = frozenset(
    {ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.STOPPED}
)
"""The states a replica does not leave: its process is gone."""


def _replica_state(word: str) -> ReplicaState:
    """A function, not the enum itself, as the validator: Pydantic reads a validator's signature,
    and an enum class's reads ``(*values)`` on Python 3.12, which it refuses at import
    (tests/unit/server/test_validator_callables.py)."""
    return ReplicaState(word)


if TYPE_CHECKING:
    ReplicaStateField = ReplicaState
else:
    ReplicaStateField = Annotated[
        Literal[tuple(state.value for state in ReplicaState)], AfterValidator(_replica_state)
    ]
"""``ReplicaReport.state``: a :class:`ReplicaState` once read. Taken in as the ``Literal`` of its
words, which the field was before the enum: FastAPI lists every enum a field is annotated with
as an OpenAPI component, so the document, the inline schema and the 422 text stay as they were."""


class ReplicaReport(Lenient):
    """What the agent knows of one replica it was given."""

    job_id: int
    replica: int
    state: ReplicaStateField
    exit_code: int | None = None
    reason: str = ""
    pid: int | None = None
    memory_used_mib: dict[str, int] = Field(
        default_factory=dict, description="Per device UUID, when the probe can measure it."
    )
    limits: str = Field(
        default="",
        description="Which CPU/memory enforcement applies to it (e.g. 'limits: cgroup v1"
        " memory=2048Mi cpu=1500m'); empty: not reported (older agent, or it never started).",
    )
    attempt: int | None = Field(
        default=None,
        ge=1,
        description="Which run of the job this process is (Work.attempt); null from an older"
        " agent. A server adopts a running replica only when it is the job's current attempt.",
    )
    stop_cause: Literal["", "lease_expired"] = Field(
        default="",
        description="'lease_expired': its supervisor stopped it because the agent's lease on it"
        " ran out (the agent was cut off from the server); empty: any other end.",
    )
    ports: list[Port] = Field(
        default_factory=list,
        max_length=MAX_REPLICA_PORTS,
        description="The host ports the agent gave it (image replicas: published under the"
        " bridge network); empty: none, or an older agent.",
    )
    checkpoint_age_s: float | None = Field(
        default=None,
        ge=0,
        le=1e10,
        description="Seconds since the replica last wrote its $XPUPOOL_CHECKPOINT_FILE (an age,"
        " not a time: the agent's clock need not agree with the server's); null: it wrote none,"
        " or an older agent.",
    )
    progress_rate: float | None = Field(
        default=None,
        gt=0,
        le=MAX_RATE,
        description="The rate (steps or tokens per second) the replica wrote to its"
        " $XPUPOOL_PROGRESS_FILE since the last report; null: nothing new, or an older agent.",
    )


class StartingReport(LenientIn):
    """A replica the agent was given whose process has not started yet, and the step it is at
    (``pulling IMAGE: 3 layers copied``): recorded in the job's events when it changes, so a
    user can follow a long image pull (issue 45). Not a :class:`ReplicaReport`: the server takes
    a replica's first report as its start."""

    job_id: int
    replica: int = Field(ge=0)
    attempt: int | None = Field(default=None, ge=1)
    step: str = Field(min_length=1, max_length=MAX_STEP_CHARS)


class VolumeUsageReport(LenientIn):
    """What one volume directory holds on the node (agent/volume_usage.py): a per-tenant
    volume's tenant directory, or a shared volume's whole."""

    name: Name
    tenant: Name | None = None
    bytes: int = Field(ge=0, le=1 << 62)
    complete: bool = Field(True, description="False: the walk stopped at its bound; at least.")


class CardRecut(Lenient):
    """A re-cut of one of the node's partitioned cards (issue 53; ``server/plane/card_recut.py``):
    the agent cuts the card ``card`` into ``layout`` with the vendor tool, destroying only
    instances nothing of its own runs on, and its next registration reports the instances."""

    card: str = Field(max_length=200, description="The card's UUID (its instances' partition_of).")
    layout: list[str] = Field(
        max_length=64,
        description="The wanted instances: '3g.40gb@0' (MIG profile@first memory slice), "
        "'vir05_1c_16g' (an Ascend vNPU template).",
    )


class RecutFailure(LenientIn):
    """A re-cut the agent could not carry out: its vendor tool failed, or a replica of its own
    runs on an instance the re-cut destroys. The server drops the wanted layout and records
    ``reason`` in the card's events."""

    card: str = Field(max_length=200)
    reason: str = Field(max_length=500)


class Heartbeat(LenientIn):
    node: str
    metrics: list[DeviceMetrics] = Field(
        default_factory=list,
        max_length=256,
        description="One per registered device at most; a UUID the node did not register is 422.",
    )
    replicas: list[ReplicaReport] = Field(default_factory=list)
    starting: list[StartingReport] = Field(
        default_factory=list,
        max_length=MAX_STARTING_REPORTS,
        description="Replicas given and not started yet, with what the agent is doing for them"
        " (an image's pull); absent from an older agent.",
    )
    volumes: list[VolumeUsageReport] | None = Field(
        default=None,
        max_length=64,
        description="The bytes in the volumes this node mounts; null: not measured this time.",
    )
    recut_failed: list[RecutFailure] = Field(
        default_factory=list,
        max_length=64,
        description="Re-cuts (HeartbeatReply.recut) the agent could not carry out; absent from an"
        " older agent.",
    )


class DeviceAssignment(Lenient):
    uuid: str
    index: int
    vendor: str
    model: str
    memory_mib: int = Field(description="Device memory granted on this card.")
    core_permille: int = Field(description="Compute granted, thousandths of the card.")
    card_memory_mib: int
    partition: str | None = Field(
        None,
        description="The partition profile the device is (a MIG instance, a vNPU); null: a card.",
    )


class ReplicaAssignment(Lenient):
    replica: int
    allocation_id: int
    node: str
    cpu_milli: int
    memory_mib: int
    devices: list[DeviceAssignment]
    ports: list[int] = Field(
        default_factory=list,
        description="The host ports its replica listens on, as its agent reported them (image"
        " replicas); empty: none, or not reported yet.",
    )


class SecretGrant(Lenient):
    """One of the job's secrets, with its value, for the node that runs it (never stored by the
    agent outside the replica's secret files: agent/launch/secret_files.py)."""

    name: str
    value_base64: str
    env: str | None = None

    def __repr__(self) -> str:  # a log line or a traceback never shows the value
        return f"SecretGrant(name={self.name!r}, env={self.env!r})"

    __str__ = __repr__


class VolumeGrant(Lenient):
    """A volume the replica mounts, as the server resolved it for this node
    (server/services/volumes.py); the agent makes the mount (agent/launch/volume_mounts.py)."""

    name: str
    host_path: str = Field(description="The volume's directory on this node.")
    per_tenant: bool = Field(description="The job gets host_path/<tenant>, its tenant's own.")
    mount_path: str = Field(description="Where the job sees it.")
    read_only: bool


class ElasticMember(Lenient):
    """One replica of an elastic job's current world, as its size file lists it."""

    rank: int = Field(ge=0, description="Its rank: 0..N-1 in replica order.")
    replica: int = Field(ge=0, description="Its replica number (stable while it runs).")
    address: str = Field(description="Where the other replicas reach its node.")


class ElasticWorld(Lenient):
    """An elastic job's size as a replica is told it (issue 54, docs/jobs.md "Elastic jobs"):
    the agent gives it as ``XPUPOOL_REPLICAS`` and ``XPUPOOL_RANK`` at start and rewrites the
    replica's size file (``XPUPOOL_SIZE_FILE``) and signals it whenever this changes."""

    replicas: int = Field(ge=1, description="The job's replicas now (its members).")
    rank: int = Field(ge=0, description="This replica's rank among them.")
    min_replicas: int = Field(ge=1, description="The job's minimum: it never shrinks below.")
    max_replicas: int = Field(ge=1, description="The job's maximum: it never grows beyond.")
    members: list[ElasticMember] = Field(description="Every replica now, in rank order.")
    signal: str = Field(
        default="USR1", max_length=8, description="The signal sent after the file changes."
    )


class Work(Lenient):
    """One replica the agent must run on its node."""

    job_id: int
    replica: int
    name: str
    command: list[str]
    image: str | None
    pull: PullPolicy | None = Field(
        default=None, description="Its image's pull policy; null: if-not-present."
    )
    port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="The port its process listens on (the job's 'port'): 0 = on $PORT, which the"
        " agent picks (a host process too); N = on N inside its container, published on the port"
        " the agent picks; null = as an older server: an image replica is given $PORT.",
    )
    env: dict[str, str] = Field(description="The job's env plus the device variables.")
    assignment: ReplicaAssignment
    tenant: str = Field(default="", description="The job's tenant; empty from an older server.")
    attempt: int = Field(
        default=1,
        ge=1,
        description="Which run of the job this is (1 = the first); 1 from an older server.",
    )
    tenant_index: int | None = Field(
        default=None,
        ge=0,
        description="The tenant's stable index: a root agent runs the job as uid"
        " (first of --job-uid-range + index). None from an older server: such work is refused"
        " by a root agent rather than run under a uid another tenant may share.",
    )
    log_cap_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Most bytes of output the server keeps of this job (its tenant's"
        " max_job_log_mib): the agent keeps no more of the replica's log than this or its own"
        " --log-cap, whichever is lower. None from an older server: the agent's cap.",
    )
    volumes: list[VolumeGrant] = Field(
        default_factory=list, description="The volumes the replica mounts."
    )
    network: Literal["bridge", "host"] | None = Field(
        default=None,
        description="The network its queue asks for an image replica; null: the node's own.",
    )
    pull_secret: SecretGrant | None = Field(
        default=None,
        description="The registry auth file its image is pulled with; never written by the agent"
        " but to the replica's secret directory, never given to the job.",
    )
    secrets: list[SecretGrant] = Field(
        default_factory=list,
        description="The job's secrets with their values, for this replica only; never written"
        " by the agent but to the replica's secret files.",
    )
    grace_s: float | None = Field(
        default=None,
        gt=0,
        description="SIGTERM to SIGKILL when the server stops it (the job's grace); null: the"
        " agent's own --grace (and from an older server).",
    )
    checkpoint_signal: str | None = Field(
        default=None,
        max_length=8,
        description="A signal (USR1, ...) sent before SIGTERM when the server stops it, so it"
        " can save its state (model/stopping.py); null: none. An older agent ignores it.",
    )
    elastic: ElasticWorld | None = Field(
        default=None,
        description="The job's current size and ranks when it is elastic (replicas=MIN..MAX);"
        " null: a fixed-size job. An older agent ignores it.",
    )


class HeartbeatReply(Lenient):
    run: list[Work] = Field(default_factory=list, description="Replicas to start if not running.")
    stop: list[tuple[int, int]] = Field(
        default_factory=list, description="(job_id, replica) to stop: SIGTERM, then SIGKILL."
    )
    heartbeat_s: float = Field(description="How often the server expects a heartbeat.")
    lease_s: float | None = Field(
        default=None,
        gt=0,
        description="How long after sending this heartbeat the node's replicas may run without"
        " another one answered (their supervisors stop them then); null from an older server.",
    )
    lease_grace_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds from SIGTERM to SIGKILL when a lease runs out; the server requeues"
        " a silent node's jobs only after lease_s + lease_grace_s and a margin.",
    )
    recut: list[CardRecut] = Field(
        default_factory=list,
        description="Cards to re-cut, each into its wanted layout, until the node reports them"
        " cut so; empty from an older server.",
    )


class Registered(Node):
    """The answer to a registration."""

    token: str | None = Field(
        None,
        description="Registered with a bootstrap token: the node's own agent token, shown this "
        "once (the bootstrap token is spent); null otherwise.",
    )
