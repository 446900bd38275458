"""The cluster-wide objects a Kubernetes site makes before its first pod or service: the tenant's
namespace and the plane's PriorityClass (``pods.priority_class``), as lightkube resources. One
definition for the site's pods (``site.py``) and its services (``site_services.py``)."""

from __future__ import annotations

from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericGlobalResource

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
