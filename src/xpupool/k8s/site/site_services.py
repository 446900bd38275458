"""A Kubernetes site's services: the Deployments and Services it keeps as the plane's controller
wants them, and the EndpointSlices it reads their ready endpoints from (issue 49 part 4;
``server/service_sites.py`` is the seam, ``services.py`` builds the objects).

The controller hands the whole set of the site's services after each pass
(:meth:`SiteServices.want`); this module's thread makes the cluster match it, apart from the
plane's lock and never under it: a service wanted is applied (server-side apply, field manager
``xpupool-plane``, so a change of replicas or job is one idempotent request and a rolled template
is the Deployment's own rolling update), one no longer wanted is deleted (its Deployment, with
its ReplicaSets and pods by the garbage collector, and its Service). Applying again is skipped
while what is wanted is unchanged, except every :data:`RESYNC_S`, which re-applies all of it
(someone deleted a Deployment by hand: it is made again). On its first pass after the plane
starts it deletes the Deployments of this site whose service the plane no longer has (deleted
while the plane was down). A refusal (the API server's 4xx, or what no pod can say) is the
service's ``problem``, shown in its reason; anything else (the API server away) is retried after
a backoff.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightkube import Client, operators
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericNamespacedResource

from xpupool.k8s.informers.watch import Informer, backoff_s
from xpupool.k8s.site import api_errors
from xpupool.k8s.site.api_errors import exists_ok, forbidden_ok, gone_ok
from xpupool.k8s.site.cluster_objects import RawNamespace, RawPriorityClass
from xpupool.k8s.site.endpoint_slices import SliceBook, SliceEndpoints, read_slice
from xpupool.k8s.site.pods import SITE, TENANT, priority_class
from xpupool.k8s.site.services import (
    SERVICE,
    ServicePlan,
    build_deployment,
    build_service,
    object_name,
    vendor_of,
)
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_sites import ServiceKey, ServiceWant

log = logging.getLogger(__name__)

FIELD_MANAGER = "xpupool-plane"
RESYNC_S = 60.0
_VERBS = ["delete", "get", "global_list", "global_watch", "list", "patch", "post", "watch"]


class RawDeployment(GenericNamespacedResource):
    _api_info = ApiInfo(
        resource=ResourceDef("apps", "v1", "Deployment"), plural="deployments", verbs=_VERBS
    )


class RawService(GenericNamespacedResource):
    _api_info = ApiInfo(resource=ResourceDef("", "v1", "Service"), plural="services", verbs=_VERBS)


class RawEndpointSlice(GenericNamespacedResource):
    _api_info = ApiInfo(
        resource=ResourceDef("discovery.k8s.io", "v1", "EndpointSlice"),
        plural="endpointslices",
        verbs=_VERBS,
    )


class SiteServices:
    """The services of one Kubernetes site (see the module's docstring). ``vendors`` returns
    the vendors of the site's cards as the plane's book holds them (for the pods' resource
    names); it is called on this module's thread."""

    def __init__(self, config: KubernetesSiteConfig, vendors: Callable[[], set[str]]) -> None:
        self.config = config
        self.vendors = vendors
        self.slices = SliceBook()
        self._lock = threading.Lock()
        self._wanted: dict[ServiceKey, ServiceWant] | None = None  # None: not told yet
        self._applied: dict[ServiceKey, str] = {}  # what was applied last: its digest
        self._problems: dict[ServiceKey, str] = {}
        # tries of an apply answered 403 or 429 while the API server settles (api_errors.py)
        self._settling: dict[ServiceKey, int] = {}
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._swept = False
        self._client: Client | None = None
        self._informer: Informer[SliceEndpoints] | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what the plane calls
    def want(self, wants: Mapping[ServiceKey, ServiceWant]) -> None:
        with self._lock:
            if self._wanted is not None and dict(wants) == self._wanted:
                return
            self._wanted = dict(wants)
        self._wake.set()

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        try:
            namespace = self.config.namespace(tenant)
        except RequestError:
            return ()
        return self.slices.ready(namespace, object_name(service))

    def problem(self, tenant: str, service: str) -> str:
        with self._lock:
            return self._problems.get((tenant, service), "")

    # ------------------------------------------------------------------ lifecycle
    def start(self, config: SingleConfig, client: Client, resync_s: float) -> None:
        self._client = client
        informer: Informer[SliceEndpoints] = Informer(
            config,
            RawEndpointSlice,
            read_slice,
            self.slices.on_event,
            labels={SITE: self.config.name},  # copied from the Service by its controller
            resync_s=resync_s,
            name=f"site-{self.config.name}-endpointslices",
        )
        self._informer = informer.start()
        self._thread = threading.Thread(
            target=self._run, name=f"site-{self.config.name}-services", daemon=True
        )
        self._thread.start()

    def rebind(self, config: SingleConfig, client: Client) -> None:
        """Watch with ``config`` and act through ``client`` from now on (the site's credentials
        were rotated)."""
        self._client = client
        if self._informer is not None:
            self._informer.reconfigure(config)
        self._wake.set()

    def wait_synced(self, timeout_s: float | None = None) -> bool:
        return self._informer is None or self._informer.wait_synced(timeout_s)

    def stop(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._informer is not None:
            self._informer.stop()
        if self._thread is not None:
            self._thread.join(10)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        failures = 0
        while not self._closed.is_set():
            timed_out = not self._wake.wait(RESYNC_S if not failures else backoff_s(failures))
            self._wake.clear()
            if self._closed.is_set():
                return
            if timed_out and not failures:
                with self._lock:
                    self._applied = dict.fromkeys(self._applied, "")  # apply all again
            try:
                self._sync()
                failures = 0
            except Exception as exc:  # the API server unreachable: again, later
                failures += 1
                log.warning("site %s: services: %s; again later", self.config.name, exc)

    def _sync(self) -> None:
        with self._lock:
            wanted = None if self._wanted is None else dict(self._wanted)
        if wanted is None:
            return  # the controller has not had its first pass
        if not self._swept:
            self._sweep(wanted)
            self._swept = True
        for key, want in sorted(wanted.items()):
            self._apply(key, want)
        for key in [k for k in self._applied if k not in wanted]:
            self._delete(key)

    def _sweep(self, wanted: Mapping[ServiceKey, ServiceWant]) -> None:
        """Delete this site's Deployments (and Services) of services the plane no longer has."""
        client = self._client
        assert client is not None
        labels: dict[str, Any] = {SITE: self.config.name, SERVICE: operators.exists()}
        for dep in client.list(RawDeployment, namespace="*", labels=labels):
            meta = dict(dep)["metadata"]
            key = (meta["labels"].get(TENANT, ""), meta["labels"].get(SERVICE, ""))
            if key not in wanted:
                self._delete_objects(meta["namespace"], meta["name"], key)

    def _plan(self, want: ServiceWant) -> ServicePlan:
        req = want.spec.job.request
        request = None if req is None else req.to_request()
        vendor = None
        if request is not None:
            vendor = vendor_of(request, self.vendors(), self.config.name)
        return ServicePlan(
            tenant=want.tenant,
            name=want.name,
            queue=want.queue,
            site=self.config.name,
            namespace=self.config.namespace(want.tenant),
            scheduler_name=self.config.scheduler_name,
            spec=want.spec,
            replicas=want.replicas,
            vendor=vendor,
        )

    def _apply(self, key: ServiceKey, want: ServiceWant) -> None:
        client = self._client
        assert client is not None
        try:
            plan = self._plan(want)
            body = build_deployment(plan)
        except RequestError as exc:
            self._problem(key, str(exc))
            return
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if self._applied.get(key) == digest:
            return
        try:
            self._prepare(plan.namespace)
            made = client.apply(
                RawDeployment.from_dict(body), field_manager=FIELD_MANAGER, force=True
            )
            service = build_service(plan, dict(made))
            client.apply(RawService.from_dict(service), field_manager=FIELD_MANAGER, force=True)
        except ApiError as exc:
            tries = self._settling.get(key, 0) + 1
            if api_errors.refused(exc, tries):
                self._settling.pop(key, None)
                self._problem(key, f"the API server refused it: {exc}")
                return
            if exc.status.code in api_errors.SETTLING:  # a server that has just started
                self._settling[key] = tries
            raise  # tried again with the thread's backoff
        self._settling.pop(key, None)
        log.info(
            "site %s: service %s/%s: Deployment %s with %d replica(s)",
            self.config.name,
            plan.namespace,
            want.name,
            body["metadata"]["name"],
            want.replicas,
        )
        with self._lock:
            self._applied[key] = digest
            self._problems.pop(key, None)

    def _problem(self, key: ServiceKey, why: str) -> None:
        with self._lock:
            if self._problems.get(key) != why:
                log.warning("site %s: service %s/%s: %s", self.config.name, *key, why)
            self._problems[key] = why[:1000]
            self._applied.setdefault(key, "")  # deleted when no longer wanted, even so

    def _prepare(self, namespace: str) -> None:
        """The namespace (where the site makes them) and the plane's PriorityClass."""
        client = self._client
        assert client is not None
        with exists_ok(), forbidden_ok():  # the chart's, which the plane may not create
            client.create(RawPriorityClass.from_dict(priority_class()))
        if self.config.create_namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            with exists_ok():
                client.create(RawNamespace.from_dict(body))

    def _delete(self, key: ServiceKey) -> None:
        try:
            namespace = self.config.namespace(key[0])
        except RequestError:
            namespace = ""
        if namespace:
            self._delete_objects(namespace, object_name(key[1]), key)
        with self._lock:
            self._applied.pop(key, None)
            self._problems.pop(key, None)

    def _delete_objects(self, namespace: str, name: str, key: ServiceKey) -> None:
        client = self._client
        assert client is not None
        with gone_ok():
            client.delete(RawService, name, namespace=namespace)
        with gone_ok():  # its ReplicaSets and pods: the garbage collector's
            client.delete(RawDeployment, name, namespace=namespace)
        log.info("site %s: service %s/%s deleted", self.config.name, *key)
