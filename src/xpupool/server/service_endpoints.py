"""Where a service's requests may go, and how busy they keep it: the seam between the service
controller (which knows replicas, their readiness and their addresses) and the proxy (which
forwards requests and counts them).

The proxy reads only :class:`Endpoints`: a list of ready (host, port) per service, whoever found
them. On an agent site the service controller fills it from its replicas' reports and its own
readiness probes; a Kubernetes site will fill it from EndpointSlices, with no change to the proxy.
The controller reads only :class:`Traffic`: the requests in flight per service, which the proxy
counts, to scale replicas on (issue 47).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ready replica of a service: where to send a request, and which replica that is (so
    the proxy's counts and the controller's drain speak of the same one)."""

    job_id: int
    replica: int
    host: str
    port: int


class Endpoints(Protocol):
    """The ready endpoints of each service; an unknown service has none."""

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        """Ready endpoints of ``tenant``'s ``service``, excluding draining ones, in a stable
        order (the proxy round-robins over them)."""
        ...


class NoEndpoints:
    """No service has a ready endpoint: what the plane holds while no controller runs."""

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        return ()


NO_ENDPOINTS = NoEndpoints()


class Traffic(Protocol):
    """What the proxy saw of each service's requests."""

    def in_flight(self, tenant: str, service: str) -> int:
        """Requests forwarded to ``service`` and not yet answered in full."""
        ...

    def in_flight_at(self, endpoint: Endpoint) -> int:
        """Requests forwarded to this one endpoint and not yet answered (a draining replica is
        stopped when this reaches 0)."""
        ...

    def rate(self, tenant: str, service: str) -> tuple[float, float | None]:
        """Requests per second answered over the last minute, and their p99 latency in
        milliseconds (None: no request in that minute), for ``xpupool services``."""
        ...

    def keep_only(self, known: Container[tuple[str, str]]) -> None:
        """Forget the counts of services not in ``known`` (deleted) that have no request in
        flight: their series leave ``/metrics``. Called on the proxy's event loop."""
        ...
