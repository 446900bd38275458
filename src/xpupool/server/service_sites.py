"""Services on a site that runs them itself (a Kubernetes site: a Deployment plus a Service,
issue 49 part 4), beside the replica jobs the controller keeps on agent sites.

Such a site owns the replicas' lifecycle where it is native there (the cluster's Deployment
restarts, rolls and replaces pods; its readiness probe decides which get traffic); the plane's
controller still decides how many replicas (``ServiceController._desired``, the one scaling rule,
on the proxy's in-flight counts) and the proxy still forwards (to the site's
:class:`~xpupool.server.service_endpoints.Endpoints`, read from the cluster's EndpointSlices).
So a service has one spec, one scaling signal and one proxy, whichever site runs it.

``server/`` defines the seam, ``k8s/`` implements it (server imports no site's package).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from xpupool.server.schemas.services import ServiceIn
from xpupool.server.service_endpoints import Endpoint

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane


@dataclass(frozen=True, slots=True)
class ServiceWant:
    """What the controller wants of one service on a site, after its pass: the spec as stored
    (the job with a model already turned into image, command and request), the queue its
    replicas are counted under, and the replicas wanted now (between min and max)."""

    tenant: str
    name: str
    spec: ServiceIn
    queue: str
    replicas: int


ServiceKey = tuple[str, str]  # (tenant, service name)


@runtime_checkable
class ServiceSite(Protocol):
    """A site that runs services itself. Neither method may block on the network: the site
    acts from its own thread (idempotently: the same wants twice change nothing there)."""

    @property
    def name(self) -> str: ...

    def want_services(self, wants: Mapping[ServiceKey, ServiceWant]) -> None:
        """Every service this site should run now, whole: one missing from ``wants`` is
        deleted there (with its replicas), one changed is changed (a changed job rolls)."""
        ...

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        """The service's ready endpoints as the site last saw them, in a stable order."""
        ...

    def problem(self, tenant: str, service: str) -> str:
        """Why the site could not make the service as wanted (empty: nothing wrong), for the
        service's reason."""
        ...


def service_site(plane: ControlPlane, spec: ServiceIn) -> ServiceSite | None:
    """The site that runs ``spec`` itself: the one site its job's request names (``site=NAME``),
    when that site is a :class:`ServiceSite`; None for a service kept as replica jobs."""
    if spec.job.request is None:
        return None
    names = spec.job.request.to_request().sites
    if len(names) != 1:
        return None
    for site in plane.sites:
        if site.name == names[0] and isinstance(site, ServiceSite):
            return site
    return None


def service_sites(plane: ControlPlane) -> list[ServiceSite]:
    """The plane's sites that run services themselves, in order."""
    return [site for site in plane.sites if isinstance(site, ServiceSite)]
