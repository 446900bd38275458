"""A service of the plane as a Deployment plus a Service in its tenant's namespace (issue 49
part 4): pure functions, no I/O (``site_services.py`` sends what they build).

- The Deployment runs the service's job: its image, command and env, the port as the container's
  ``http`` port (and ``$PORT``, as agent nodes give it), the service's readiness probe as the
  container's readinessProbe (path, period, timeout, failure and success thresholds), the replicas
  the plane's controller decides, rolled as the controller rolls agent replicas (max surge 1, max
  unavailable 0). Its pods carry the request as xpupool's request annotation and the card count
  (and memory, cores where given) as HAMi's resource names of the one vendor the site's cards
  have, so kube-scheduler and xpupool's extender place them; labels name the service, tenant,
  queue and site (``xpupool.io/queue`` puts them under the plane's admission gate where the
  chart's policy adds it, issue 49 part 3).
- The Service selects those pods, on port ``http``, and is owned by the Deployment (the garbage
  collector removes it with it). Its EndpointSlices feed the proxy (``endpoint_slices.py``).

Object names are ``xps-<service>``, or a hash-suffixed form for a name Kubernetes refuses (``.``,
``_``, or over 59 characters), the same for a service every time.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xpupool.k8s.codec.pod_request import ANNOTATION_REQUEST
from xpupool.k8s.site.endpoint_slices import PORT_NAME
from xpupool.k8s.site.pods import CONTAINER, PRIORITY_CLASS, QUEUE, SITE, TENANT, kind_of_vendor
from xpupool.model.errors import RequestError
from xpupool.model.request import Request
from xpupool.model.request_model import request_to_dict
from xpupool.server.schemas.services import ServiceIn

__all__ = [
    "DEFAULT_PORT",
    "SERVICE",
    "ServicePlan",
    "build_deployment",
    "build_service",
    "object_name",
    "vendor_of",
]

SERVICE = "xpupool.io/service"
DEFAULT_PORT = 8000  # where a service that names no port listens ($PORT), as on agent nodes
_CLEAN = re.compile(r"^[a-z]([a-z0-9-]{0,57}[a-z0-9])?$")  # "xps-" + this: a DNS-1035 label


def object_name(service: str) -> str:
    """The Deployment's and the Service's name for ``service``."""
    if _CLEAN.fullmatch(service):
        return f"xps-{service}"
    digest = hashlib.sha256(service.encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9-]", "-", service)[:45].strip("-")
    return f"xps-{stem}-{digest}" if stem else f"xps-{digest}"


def vendor_of(request: Request, site_vendors: Iterable[str], site: str) -> str | None:
    """The vendor whose resource names the pods ask for: the request's, else the one vendor of
    the site's cards; None for a replica without cards. :class:`RequestError` on
    ``job.request`` when that is not one vendor."""
    if not request.devices.count:
        return None
    have = set(site_vendors)
    asked = set(request.devices.vendors)
    choice = sorted(asked & have if asked else have)
    if len(choice) != 1:
        why = (
            f"site {site} has no cards of vendor {', '.join(sorted(asked))}"
            if asked and not choice
            else f"site {site} has cards of {len(choice)} vendors: name one (vendor=...)"
        )
        raise RequestError("job.request", None, why)
    if kind_of_vendor(choice[0]) is None:
        raise RequestError("job.request", choice[0], f"site {site}: no HAMi resource names")
    return choice[0]


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """Everything a service's two objects are made of."""

    tenant: str
    name: str
    queue: str
    site: str
    namespace: str
    scheduler_name: str
    spec: ServiceIn  # the job with a model already turned into image, command and request
    replicas: int
    vendor: str | None  # of the cards its pods ask for (vendor_of)


def _labels(plan: ServicePlan) -> dict[str, str]:
    return {SERVICE: plan.name, TENANT: plan.tenant, SITE: plan.site}


def _selector(plan: ServicePlan) -> dict[str, str]:
    """Immutable in a Deployment: the service and its tenant, nothing a change could move."""
    return {SERVICE: plan.name, TENANT: plan.tenant}


def _resources(plan: ServicePlan, req: Request) -> dict[str, str]:
    limits: dict[str, str] = {}
    if req.cpu_milli:
        limits["cpu"] = f"{req.cpu_milli}m"
    if req.memory_mib:
        limits["memory"] = f"{req.memory_mib}Mi"
    kind = None if plan.vendor is None else kind_of_vendor(plan.vendor)
    if kind is None:
        return limits
    dev = req.devices
    limits[kind.count] = str(dev.count)
    if dev.memory_mib and kind.memory:
        limits[kind.memory] = str(math.ceil(dev.memory_mib / kind.memory_unit_mib))
    if dev.core_permille and kind.cores:
        cores = max(1, dev.core_permille * kind.cores_per_card // 1000)
        limits[kind.cores] = str(min(kind.cores_per_card, cores))
    return limits


def build_deployment(plan: ServicePlan) -> dict[str, Any]:
    """The Deployment of ``plan``. Raises :class:`RequestError` naming the field for what a
    pod cannot say (no image, secrets or volumes: not on a Kubernetes site yet)."""
    job = plan.spec.job
    if not job.image:
        raise RequestError("job.image", None, f"site {plan.site} runs container images only")
    if job.secrets:
        why = f"site {plan.site}: a service's secrets are not passed to its pods yet"
        raise RequestError("job.secrets", None, why)
    if job.volumes:
        why = f"site {plan.site}: a service's volumes are not mounted on a Kubernetes site yet"
        raise RequestError("job.volumes", None, why)
    port = plan.spec.port or DEFAULT_PORT
    req = Request() if job.request is None else job.request.to_request()
    env = [{"name": k, "value": v} for k, v in sorted((job.env or {}).items())]
    env.append({"name": "PORT", "value": str(port)})
    probe = plan.spec.readiness
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image,
        "env": env,
        "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": probe.path, "port": PORT_NAME},
            "periodSeconds": max(1, math.ceil(probe.interval_s)),
            "timeoutSeconds": max(1, math.ceil(probe.timeout_s)),
            "failureThreshold": probe.failures,
            "successThreshold": probe.successes,
        },
        "resources": {"limits": _resources(plan, req)},
    }
    if job.command:
        container["command"] = list(job.command)
    placed = Request(cpu_milli=req.cpu_milli, memory_mib=req.memory_mib, devices=req.devices)
    labels = _labels(plan)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": object_name(plan.name), "namespace": plan.namespace, "labels": labels},
        "spec": {
            "replicas": plan.replicas,
            "selector": {"matchLabels": _selector(plan)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": {**labels, QUEUE: plan.queue},
                    "annotations": {ANNOTATION_REQUEST: json.dumps(request_to_dict(placed))},
                },
                "spec": {
                    "schedulerName": plan.scheduler_name,
                    "priorityClassName": PRIORITY_CLASS,
                    "preemptionPolicy": "Never",
                    "containers": [container],
                },
            },
        },
    }


def build_service(plan: ServicePlan, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The Service of ``plan``, owned by ``owner`` (its Deployment as the API returned it)."""
    meta = owner["metadata"]
    port = plan.spec.port or DEFAULT_PORT
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": object_name(plan.name),
            "namespace": plan.namespace,
            "labels": _labels(plan),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "spec": {
            "selector": _selector(plan),
            "ports": [
                {"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
