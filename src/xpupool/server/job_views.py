"""A job as the API shows it, from its stored row: read by the plane's routes (no lock), by a
submission's answer and by a Kubernetes site's gated pods. Schemas and the job's lifecycle only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xpupool.model.qos import DEFAULT_QOS, QOS_NAMES
from xpupool.server.job_lifecycle import retry_policy
from xpupool.server.schemas.agent_protocol import ReplicaAssignment
from xpupool.server.schemas.jobs import Job, JobEvent, JobPhase, SecretRef
from xpupool.server.schemas.volumes import VolumeMount
from xpupool.server.wire_values import readable


def job_view(row: Any, assignments: list[ReplicaAssignment]) -> Job:
    """The API form of job ``row`` with ``assignments``; reads nothing live (no lock)."""
    shown = readable  # a lone surrogate an older release stored would make the reply fail
    return Job(
        id=row["id"],
        name=shown(row["name"]),
        tenant=row["tenant"],
        queue=row["queue"],
        state=JobPhase(row["state"]),
        reason=shown(row["reason"]),
        priority=row["priority"],
        request=shown(row["request"]),
        command=shown(row["command"]),
        image=shown(row["image"]),
        pull=row.get("pull"),
        pull_secret=row.get("pull_secret"),
        port=row.get("port"),
        env=shown(row["env"]),
        secrets=[SecretRef.model_construct(**ref) for ref in row.get("secrets") or ()],
        volumes=[VolumeMount.model_construct(**m) for m in row.get("volumes") or ()],
        on_node_lost=row["on_node_lost"],
        on_site_lost=row.get("on_site_lost") or "wait",
        flavor=row["flavor"],
        site=row.get("site"),
        assignments=assignments,
        exit_code=row["exit_code"],
        attempts=row["attempts"],
        retries=row["retries"] or 0,
        stop_cause=row.get("stop_cause"),
        max_retries=row["max_retries"],
        retry_on=sorted(retry_policy(row).retry_on),
        max_runtime_s=row["max_runtime_s"],
        reservation=row.get("reservation"),
        preemptible=bool(row.get("preemptible")),
        qos=_qos(row["request"]),
        checkpoint_at=None,  # a running job's, from the plane: services/jobs.py get
        not_before=row.get("not_before"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _qos(request: object) -> str:
    """The job's QoS class as its stored request says it (absent: the default)."""
    given = request.get("qos") if isinstance(request, dict) else None
    return given if isinstance(given, str) and given in QOS_NAMES else DEFAULT_QOS.value


@dataclass(frozen=True, slots=True)
class Submitted:
    """A stored submission: its row as written and the reasons of its first events; what the
    answer shows."""

    row: dict[str, Any]
    reasons: tuple[str, ...]

    def view(self) -> Job:
        """The job as ``POST /v1/jobs`` answers it: pending as committed."""
        job = job_view(self.row, [])
        phase = JobPhase(self.row["state"])
        at = self.row["created_at"]
        job.events = [JobEvent(at=at, state=phase, reason=reason) for reason in self.reasons]
        return job
