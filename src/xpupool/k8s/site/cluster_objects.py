"""The objects a Kubernetes site makes beside its pods and services: the tenant's namespace and
the plane's PriorityClass (``pods.priority_class``), cluster-wide, before its first pod or
service, and a run's Secret, as lightkube resources. One definition for the site's pods
(``creations.py``, ``finished.py``) and its services (``site_services.py``)."""

from __future__ import annotations

from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericGlobalResource, GenericNamespacedResource

_VERBS = ["delete", "get", "global_list", "list", "post"]


class RawNamespace(GenericGlobalResource):
    _api_info = ApiInfo(
        resource=ResourceDef("", "v1", "Namespace"), plural="namespaces", verbs=_VERBS
    )


class RawPriorityClass(GenericGlobalResource):
    _api_info = ApiInfo(
        resource=ResourceDef("scheduling.k8s.io", "v1", "PriorityClass"),
        plural="priorityclasses",
        verbs=_VERBS,
    )


class RawSecret(GenericNamespacedResource):
    _api_info = ApiInfo(resource=ResourceDef("", "v1", "Secret"), plural="secrets", verbs=_VERBS)
