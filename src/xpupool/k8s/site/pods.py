"""A job's replica as a Pod of a Kubernetes site, and a Pod's state as a replica report: pure
functions, no I/O (the site's worker sends what they build; ``site.py``).

The plane admits and places a job in its own engine, as for any site: that placement is the
admission, and it holds the job's cards in the plane's books from then on. The Pod carries the
placement as constraints the extender checks rather than trusts: a required node affinity on the
node the plane chose and HAMi's UUID list (``nvidia.com/use-gpuuuid``) of the cards it chose, with
the shares as HAMi's resource names (count, memory per card, cores per card). kube-scheduler and
xpupool's extender then bind it, on those cards if they are still free there, or it waits with
the extender's reason. So the plane counts a pod's cards once, from its own allocation, from
admission until the site reports the pod gone; it never reads the cards of its own pods from their
annotations (docs/kubernetes.md, "Plane and extender").

A gang's pods are the exception (issue 49, "a gang becomes xpupool's gang annotations"): pinned
each to its replica's node and cards, the extender could not place them as one group (its gang
reserves places for a group of identical members, ``k8s/extender/gang.py``). They carry the
group instead, ``xpupool.io/gang: xp-<job>-<attempt>`` and ``xpupool.io/gang-size`` (the reader
of ``k8s/informers/pod_groups.py``), with the same shares and no node or card constraint: the
extender binds all of them or none, and the site follows the cards each was bound to
(``foreign.py``, ``server/plane/bound_cards.py``), as for a kubectl user's pod.

Names are ``xp-<job>-<replica>-<attempt>``: creating a pod twice is a 409 the worker takes as done,
so a restarted plane, or a retried request, never makes a second one. Labels say whose pod it is
(:data:`JOB`, :data:`REPLICA`, :data:`ATTEMPT`, tenant, queue, site), and are all the plane reads
back from its pods, validated as strictly as an agent's report.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xpupool.k8s.codec.resource_names import DEVICE_KINDS, DeviceKind
from xpupool.k8s.informers.pod_groups import GANG_ANNOTATION, GANG_SIZE_ANNOTATION
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError
from xpupool.server.plane.site_runs import Waiting
from xpupool.server.schemas.agent_protocol import ReplicaReport, ReplicaState

__all__ = [
    "ATTEMPT",
    "JOB",
    "PRIORITY_CLASS",
    "QUEUE",
    "REPLICA",
    "SITE",
    "TENANT",
    "PodPlan",
    "PodState",
    "build_pod",
    "gang_name",
    "kind_of_vendor",
    "pod_name",
    "pod_state",
    "pod_status",
    "priority_class",
    "report",
    "secret_object",
    "secrets_name",
    "waiting",
]

JOB = "xpupool.io/job"
REPLICA = "xpupool.io/replica"
ATTEMPT = "xpupool.io/attempt"
TENANT = "xpupool.io/tenant"
QUEUE = "xpupool.io/queue"
SITE = "xpupool.io/plane-site"
CONTAINER = "main"
SECRETS_DIR = "/run/secrets"  # where a job finds its secrets, as in an agent node's container
SECRETS_ENV = "XPUPOOL_SECRETS_DIR"
# The plane's PriorityClass: its pods never preempt (``preemptionPolicy: Never``): only the plane
# preempts, for quota; kube's priority admission refuses a pod whose policy differs from its
# class's, so the pods name this class, which the site's worker creates when it is missing.
PRIORITY_CLASS = "xpupool-plane"
MAX_ID = (1 << 53) - 1  # job ids, replicas and attempts as the plane stores them
MAX_REASON_CHARS = 1024  # a pod's reason and message, as the job's reason takes them
TERMINAL = ("Succeeded", "Failed")  # a pod's phases once it has ended
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # kube's C_IDENTIFIER-ish env var name


def priority_class() -> dict[str, Any]:
    """The plane's PriorityClass (:data:`PRIORITY_CLASS`): value 0, never preempting."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS},
        "value": 0,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "pods the xpupool control plane created: only the plane preempts them",
    }


def pod_name(job: int, replica: int, attempt: int) -> str:
    """The one name of ``job``'s ``replica`` in its ``attempt``-th run."""
    return f"xp-{job}-{replica}-{attempt}"


def kind_of_vendor(vendor: str) -> DeviceKind | None:
    """HAMi's device type for a card of ``vendor`` whose shares its resource names express
    (count, memory, cores), or None when HAMi has none (such a job is refused for the site)."""
    for kind in DEVICE_KINDS:
        if kind.vendor == vendor and kind.model is None and kind.memory and kind.cores:
            return kind
    return None


@dataclass(frozen=True, slots=True)
class PodPlan:
    """Everything one replica's pod is made of: the job as stored, where the plane placed it,
    and the site's settings."""

    job: int
    replica: int
    attempt: int
    tenant: str
    queue: str
    site: str
    namespace: str
    scheduler_name: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    allocation: Allocation
    vendor: str  # of the allocation's cards (the engine never mixes vendors in one request)
    card_memory_mib: int  # memory of a whole card of the allocation, for the cores of a share
    # the job's secrets: (secret name, env var or None), in the Secret :func:`secrets_name` names
    secrets: tuple[tuple[str, str | None], ...] = ()
    volumes: bool = False  # the job mounts volumes: not on a Kubernetes site yet (refused)
    gang_size: int = 0  # the job is a gang of that many pods on the site (0: not a gang)


def _limits(plan: PodPlan) -> tuple[dict[str, str], dict[str, str]]:
    """(resource limits, annotations) expressing the allocation's cards in HAMi's names."""
    alloc = plan.allocation
    limits: dict[str, str] = {}
    if alloc.cpu_milli:
        limits["cpu"] = f"{alloc.cpu_milli}m"
    if alloc.memory_mib:
        limits["memory"] = f"{alloc.memory_mib}Mi"
    if not alloc.devices:
        return limits, {}
    kind = kind_of_vendor(plan.vendor)
    if kind is None or kind.memory is None or kind.cores is None or kind.use_uuid_key is None:
        raise RequestError("vendor", plan.vendor, f"site {plan.site}: no HAMi resource names")
    memory = max(d.memory_mib for d in alloc.devices)
    cores = max(d.core_permille for d in alloc.devices)
    limits[kind.count] = str(len(alloc.devices))
    limits[kind.memory] = str(math.ceil(memory / kind.memory_unit_mib))
    limits[kind.cores] = str(max(1, min(kind.cores_per_card, cores * kind.cores_per_card // 1000)))
    return limits, {kind.use_uuid_key: ",".join(d.uuid for d in alloc.devices)}


def build_pod(plan: PodPlan) -> dict[str, Any]:
    """The Pod of ``plan`` as the apiserver takes it (a dict). Raises :class:`RequestError` for
    what no Pod can say (an env name Kubernetes refuses, cards of a vendor HAMi has no names
    for)."""
    if plan.volumes:
        why = f"site {plan.site}: a job's volumes are not mounted on a Kubernetes site yet"
        raise RequestError("volumes", None, why)
    limits, annotations = _limits(plan)
    if plan.gang_size > 1:  # the group, not each member's place: the extender places them
        annotations = {
            GANG_ANNOTATION: gang_name(plan.job, plan.attempt),
            GANG_SIZE_ANNOTATION: str(plan.gang_size),
        }
    env: list[dict[str, Any]] = []
    for name, value in plan.env.items():
        if not _ENV_NAME.fullmatch(name):
            raise RequestError(f"env.{name}", name, "not an environment variable name for a pod")
        env.append({"name": name, "value": value})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image,
        "resources": {"limits": limits},
    }
    volumes: list[dict[str, Any]] = []
    if plan.secrets:  # as on agent nodes: files in $XPUPOOL_SECRETS_DIR, some also variables
        held = secrets_name(plan.job, plan.attempt)
        env.append({"name": SECRETS_ENV, "value": SECRETS_DIR})
        for secret, var in plan.secrets:
            if var is not None:
                ref = {"secretKeyRef": {"name": held, "key": secret}}
                env.append({"name": var, "valueFrom": ref})
        volumes.append({"name": "secrets", "secret": {"secretName": held, "defaultMode": 0o400}})
        container["volumeMounts"] = [
            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}
        ]
    if plan.command:
        container["command"] = list(plan.command)
    if env:
        container["env"] = env
    node = plan.allocation.node
    placed: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(plan.job, plan.replica, plan.attempt),
            "namespace": plan.namespace,
            "labels": {
                JOB: str(plan.job),
                REPLICA: str(plan.replica),
                ATTEMPT: str(plan.attempt),
                TENANT: plan.tenant,
                QUEUE: plan.queue,
                SITE: plan.site,
            },
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": plan.scheduler_name,
            "priorityClassName": PRIORITY_CLASS,
            "restartPolicy": "Never",
            "preemptionPolicy": "Never",
            **({} if plan.gang_size > 1 else placed),
            "containers": [container],
            **({"volumes": volumes} if volumes else {}),
        },
    }


def gang_name(job: int, attempt: int) -> str:
    """The group of ``job``'s gang pods in its ``attempt``-th run (per namespace)."""
    return f"xp-{job}-{attempt}"


def secrets_name(job: int, attempt: int) -> str:
    """The Secret holding the secrets of ``job``'s ``attempt``-th run (one for all replicas)."""
    return f"xp-{job}-{attempt}-secrets"


def secret_object(plan: PodPlan, values: Mapping[str, bytes]) -> dict[str, Any]:
    """The Secret of ``plan``'s run: each of the job's secrets under its name, labelled as
    the run's pods are (so that a stop deletes it with them)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secrets_name(plan.job, plan.attempt),
            "namespace": plan.namespace,
            "labels": {
                JOB: str(plan.job),
                ATTEMPT: str(plan.attempt),
                TENANT: plan.tenant,
                SITE: plan.site,
            },
        },
        "data": {name: base64.b64encode(value).decode() for name, value in values.items()},
    }


@dataclass(frozen=True, slots=True)
class PodState:
    """What the plane reads back from one of its pods."""

    job: int
    replica: int
    attempt: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str  # the node it is bound to; empty while unbound
    deleting: bool  # metadata.deletionTimestamp is set
    reason: str
    exit_code: int | None
    waiting: str = ""  # why kube-scheduler (and the extender) has not bound it, while Pending


def _label_int(labels: Mapping[str, Any], key: str) -> int:
    text = labels.get(key)
    if not isinstance(text, str) or not text.isdigit() or len(text) > 16 or int(text) > MAX_ID:
        raise RequestError(f"metadata.labels[{key}]", text, "expected a whole number")
    return int(text)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(where, repr(value)[:80], "expected an object")
    return value


def _text(value: object, limit: int = MAX_REASON_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def pod_state(obj: Mapping[str, Any]) -> PodState:
    """A pod of the plane's as :class:`PodState`; :class:`RequestError` naming the field for
    one whose labels or status are not what the plane writes and kubelet reports."""
    meta = _mapping(obj.get("metadata"), "metadata")
    labels = _mapping(meta.get("labels"), "metadata.labels")
    return pod_status(
        obj,
        job=_label_int(labels, JOB),
        replica=_label_int(labels, REPLICA),
        attempt=_label_int(labels, ATTEMPT),
    )


def pod_status(obj: Mapping[str, Any], *, job: int, replica: int, attempt: int) -> PodState:
    """A pod's status as :class:`PodState` of ``job``'s ``replica`` in its ``attempt``-th run:
    the plane's own pods name these in their labels (:func:`pod_state`), a kubectl user's gated
    pod is known by its uid (``gated.py``). :class:`RequestError` naming the field for a status
    kubelet would not report."""
    meta = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    phase = status.get("phase", "Pending")
    if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        raise RequestError("status.phase", _text(phase, 40), "not a pod phase")
    node = spec.get("nodeName") or ""
    if not isinstance(node, str) or len(node) > 253:
        raise RequestError("spec.nodeName", _text(node, 80), "not a node name")
    code: int | None = None
    why = [_text(status.get("reason")), _text(status.get("message"))]
    statuses = status.get("containerStatuses")
    for st in statuses if isinstance(statuses, list) else []:
        terminated = _mapping(_mapping(st, "status.containerStatuses").get("state"), "state")
        done = _mapping(terminated.get("terminated"), "state.terminated")
        exit_code = done.get("exitCode")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            continue
        if -(1 << 31) <= exit_code < (1 << 31) and (code is None or exit_code):
            code = exit_code
            why.append(_text(done.get("reason")))
    waiting = ""
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) and phase == "Pending" else []:
        c = _mapping(cond, "status.conditions")
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            waiting = ": ".join(w for w in (_text(c.get("reason")), _text(c.get("message"))) if w)
    return PodState(
        waiting=waiting[:MAX_REASON_CHARS],
        job=job,
        replica=replica,
        attempt=attempt,
        phase=phase,
        node=node,
        deleting=meta.get("deletionTimestamp") is not None,
        reason=": ".join(w for w in why if w)[:MAX_REASON_CHARS],
        exit_code=code,
    )


def waiting(state: PodState, site: str) -> Waiting:
    """The note that the pod's run waits on ``site`` with kube-scheduler's and the extender's
    reason (the plane admitted the job, the cluster has not bound its pod: another scheduler's
    pod took the cards in between, say)."""
    why = f"replica {state.replica} waits on site {site}: {state.waiting}"
    return Waiting(state.job, state.attempt, why)


def report(state: PodState, *, gone: bool = False, stopping: bool = False) -> ReplicaReport | None:
    """The replica report a pod's state makes, or None while it says nothing new to the plane
    (pending: the job stays scheduled, with the extender's reason on the pod). ``gone``: the
    pod was deleted; ``stopping``: the plane asked for that (a stop), else the replica was lost
    (someone else deleted it, or its node went)."""

    def made(st: ReplicaState, reason: str = "", code: int | None = None) -> ReplicaReport:
        return ReplicaReport(
            job_id=state.job,
            replica=state.replica,
            attempt=state.attempt,
            state=st,
            reason=reason,
            exit_code=code,
        )

    if state.phase == "Succeeded":
        return made(ReplicaState.SUCCEEDED, code=0)
    if state.phase == "Failed":
        reason = state.reason or "the pod failed"
        return made(ReplicaState.FAILED, reason, state.exit_code)
    if gone:
        if stopping:
            return made(ReplicaState.STOPPED, "pod deleted")
        why = f"pod {pod_name(state.job, state.replica, state.attempt)} deleted by someone else"
        return made(ReplicaState.FAILED, why)
    if state.phase == "Running" and not state.deleting:
        return made(ReplicaState.RUNNING, state.reason)
    return None
