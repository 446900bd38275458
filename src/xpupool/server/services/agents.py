"""The agent protocol: heartbeats carry metrics and replica reports; the reply says what to run
and what to stop. The server decides, the agent acts and reports back; devices of a stopped job
are freed only when the agent reports its processes gone. A node that misses heartbeats for
``lost_after_s`` is marked lost: its jobs are requeued or marked lost, per the job's policy.
Silence is timed on the server's monotonic clock, from when it received each heartbeat: never
a difference of wall-clock times, the agent's or its own (``NodeRecord.heard_at``).

What a heartbeat, a log upload or a node's silence changes in the plane's books is the plane's own
operation (``server/plane/agent_reports.py``, one step under the plane's lock each); this module
shapes what the reply hands out for a replica (its command, secrets, volumes, environment)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import Connection

from xpupool.server.auth import Principal
from xpupool.server.job_checkpoints import stopping_of
from xpupool.server.plane import ControlPlane, HeldJob, agent_reports, secret_rows
from xpupool.server.plane.agent_reports import STEP_EVENT_EVERY_S as STEP_EVENT_EVERY_S
from xpupool.server.plane.site_runs import SiteReport
from xpupool.server.schemas.agent_protocol import (
    DeviceMetrics,
    ElasticWorld,
    Heartbeat,
    HeartbeatReply,
    SecretGrant,
    Work,
)
from xpupool.server.services import volumes
from xpupool.server.services.grants import log_caps
from xpupool.server.services.jobs import assignment
from xpupool.server.services.replica_env import (
    distributed_env,
    elastic_world,
    node_address,
    port_range,
)


def heartbeat(plane: ControlPlane, body: Heartbeat, who: Principal | None = None) -> HeartbeatReply:
    """Apply one heartbeat of ``body.node`` and answer it: the plane's
    :func:`~xpupool.server.plane.agent_reports.apply_heartbeat`, with the runs its reply hands
    out shaped here (:func:`_work`)."""

    def work(conn: Connection, job: HeldJob, alloc: Any, row: Any, network: str | None) -> Work:
        return _work(plane, conn, job, alloc, row, network)

    return agent_reports.apply_heartbeat(plane, body, who, work)


def heartbeat_idle(plane: ControlPlane, nodes: list[str]) -> set[str]:
    """What a heartbeat with no metrics and no reports does, for many nodes in one transaction:
    :func:`~xpupool.server.plane.agent_reports.hear_idle`. Returns the names among ``nodes``
    that need a heartbeat of their own."""
    return agent_reports.hear_idle(plane, nodes)


def site_reports(plane: ControlPlane, reports: Sequence[SiteReport]) -> None:
    """Many replica reports of a site that runs work itself, ``(node, report)``, and its runs'
    waiting notes, in one transaction:
    :func:`~xpupool.server.plane.agent_reports.apply_site_reports`."""
    agent_reports.apply_site_reports(plane, reports)


def site_metrics(plane: ControlPlane, node: str, metrics: Sequence[DeviceMetrics]) -> int:
    """Card readings a site read of its own ``node``, kept as a heartbeat's are:
    :func:`~xpupool.server.plane.agent_reports.apply_site_metrics`. Returns those kept."""
    return agent_reports.apply_site_metrics(plane, node, metrics)


def _work(
    plane: ControlPlane, conn: Connection, job: HeldJob, alloc: Any, row: Any, network: str | None
) -> Work:
    """The run a heartbeat's reply hands out for ``alloc``'s replica of ``job`` (its stored
    ``row``; ``network``: its queue's stored network), read in the heartbeat's transaction."""
    return Work(
        job_id=job.id,
        replica=alloc.replica,
        name=str(row["name"]),
        command=list(row["command"]),
        image=row["image"],
        pull=row["pull"],
        port=row["port"],
        env={**_distributed(plane, job, alloc.replica), **row["env"]},
        assignment=assignment(plane, alloc),
        tenant=job.tenant,
        tenant_index=plane.tenant_index.get(job.tenant),
        attempt=max(job.attempt, 1),
        log_cap_bytes=log_caps(plane, job.queue, conn).job_bytes,
        secrets=_grants(plane, conn, job.tenant, row["secrets"]),
        pull_secret=next(
            iter(_grants(plane, conn, job.tenant, _pull_ref(row["pull_secret"]))), None
        ),
        volumes=volumes.grants(conn, job.tenant, job.queue, alloc.node, row["volumes"]),
        network=_network(network) if row["image"] else None,
        grace_s=stopping_of(row["request"])[0],
        checkpoint_signal=stopping_of(row["request"])[1],
        elastic=_elastic(plane, job, alloc.replica),
    )


def _network(stored: str | None) -> Literal["bridge", "host"] | None:
    """A queue's stored network as the protocol takes it (anything else: the node's own)."""
    return "host" if stored == "host" else "bridge" if stored == "bridge" else None


def _pull_ref(name: str | None) -> list[dict[str, Any]] | None:
    return None if name is None else [{"name": name, "env": None}]


def _grants(
    plane: ControlPlane, conn: Connection, tenant: str, refs: list[dict[str, Any]] | None
) -> list[SecretGrant]:
    """The job's secrets opened for the node that runs it. One deleted since the submission is
    left out (the job finds no file of that name)."""
    if not refs:
        return []
    sealed = secret_rows.sealed(conn, tenant, [r["name"] for r in refs])
    grants = []
    for ref in refs:
        found = sealed.get(ref["name"])
        if found is None:
            continue
        value = plane.secret_box.unseal(tenant, ref["name"], found)
        grants.append(
            SecretGrant(
                name=ref["name"],
                value_base64=base64.b64encode(value).decode(),
                env=ref.get("env"),
            )
        )
    return grants


def _distributed(plane: ControlPlane, job: HeldJob, replica: int) -> dict[str, str]:
    addresses = {
        name: node_address(name, rec.node.labels, rec.source)
        for name in {a.node for a in job.allocations}
        if (rec := plane.node(name)) is not None
    }
    ports = {
        name: port_range(rec.node.labels)
        for name in {a.node for a in job.allocations}
        if (rec := plane.node(name)) is not None
    }
    return distributed_env(job.id, job.allocations, replica, addresses, ports)


def _elastic(plane: ControlPlane, job: HeldJob, replica: int) -> ElasticWorld | None:
    """An elastic job's size and ranks for ``replica``: its replicas not being stopped by a
    shrink (``plane/elastic_runs.py``); None for a fixed-size job."""
    if job.elastic is None:
        return None
    members = [a for a in job.allocations if a.replica not in job.shrinking]
    addresses = {
        name: node_address(name, rec.node.labels, rec.source)
        for name in {a.node for a in members}
        if (rec := plane.node(name)) is not None
    }
    high = job.elastic.max_replicas or job.elastic.replicas
    return elastic_world(members, replica, addresses, job.elastic.replicas, high)


def append_log(
    plane: ControlPlane,
    node: str,
    job_id: int,
    replica: int,
    chunk: bytes,
    offset: int | None = None,
    attempt: int | None = None,
) -> None:
    """Agents ship captured output here; only the node running that replica may write it:
    :func:`~xpupool.server.plane.agent_reports.append_log`, bounded by the job's tenant's log
    caps (``grants.log_caps``)."""
    agent_reports.append_log(
        plane,
        node,
        job_id,
        replica,
        chunk,
        offset,
        attempt,
        caps_of=lambda queue: log_caps(plane, queue),
    )


def mark_lost_nodes(plane: ControlPlane) -> list[str]:
    """Mark agent nodes silent for longer than ``lost_after_s`` as lost and deal with their jobs
    once their replicas' lease has surely run out:
    :func:`~xpupool.server.plane.agent_reports.mark_lost_nodes`. Returns the nodes newly
    marked."""
    return agent_reports.mark_lost_nodes(plane)
