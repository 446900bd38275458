"""The API calls the extender makes, on lightkube: read the pod, annotate it if it is still the
version read (a JSON merge patch carrying ``metadata.resourceVersion``: the apiserver answers 409
when anyone wrote in between), post its Binding; evict a preemption's victims; read a Node and
write HAMi's node lock on it, guarded the same way (``node_lock.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericNamespacedResource
from lightkube.types import PatchType

from xpupool.k8s.codec.node_lock import NodeApiError, NodeConflictError
from xpupool.k8s.extender.preemption import EvictionRefusedError
from xpupool.k8s.extender.verbs import BindError, PodGoneError
from xpupool.k8s.informers.kubeconfig import RawNode, RawPod


class RawPodBinding(GenericNamespacedResource):
    """A Pod's ``binding`` subresource as plain JSON both ways: the apiserver answers a Binding
    with a Status, which lightkube's typed ``Pod.Binding`` cannot read (it raised after the
    binding had succeeded, so a bound pod's shares were given back)."""

    _api_info = ApiInfo(
        resource=ResourceDef("", "v1", "Binding"),
        parent=ResourceDef("", "v1", "Pod"),
        plural="pods",
        verbs=["post"],
        action="binding",
    )


class RawPodEviction(GenericNamespacedResource):
    """A Pod's ``eviction`` subresource (``policy/v1`` Eviction) as plain JSON both ways."""

    _api_info = ApiInfo(
        resource=ResourceDef("policy", "v1", "Eviction"),
        parent=ResourceDef("", "v1", "Pod"),
        plural="pods",
        verbs=["post"],
        action="eviction",
    )


class LightkubePodApi:
    """:class:`xpupool.k8s.extender.verbs.PodApi` and :class:`xpupool.k8s.codec.node_lock.NodeLockApi` on a
    lightkube client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return dict(self.client.get(RawPod, name, namespace=namespace))
        except ApiError as exc:
            gone = PodGoneError if exc.status.code == 404 else BindError
            raise gone(f"pod {namespace}/{name}: {_why(exc)}") from None

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        annotations: Mapping[str, str | None],
    ) -> None:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        try:
            self.client.patch(
                RawPod, name, {"metadata": meta}, namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as exc:
            raise BindError(f"annotating pod {namespace}/{name}: {_why(exc)}") from None

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        meta: dict[str, str] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        binding = RawPodBinding.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
        )
        try:
            self.client.create(binding, name=name, namespace=namespace)
        except ApiError as exc:
            raise BindError(f"binding pod {namespace}/{name} to {node}: {_why(exc)}") from None

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict through the Eviction API (PodDisruptionBudgets hold; the pod's own grace period),
        only if the pod is still ``uid``; a pod already gone (404) is not an error."""
        eviction = RawPodEviction.from_dict(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}},
            }
        )
        try:
            self.client.create(eviction, name=name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return
            raise EvictionRefusedError(_why(exc)) from None

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        try:
            pod = dict(self.client.get(RawPod, name, namespace=namespace))
        except ApiError as exc:
            return exc.status.code == 404
        except Exception:  # the API cannot say now: the pod waits for the watch instead
            return False
        meta = pod.get("metadata")  # another pod by that name: gone (only when uid is given)
        return bool(uid) and isinstance(meta, Mapping) and meta.get("uid") != uid

    def get_node(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.client.get(RawNode, name))
        except ApiError as exc:
            raise NodeApiError(f"node {name}: {_why(exc)}") from None

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: Mapping[str, str | None]
    ) -> None:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        try:
            self.client.patch(RawNode, name, {"metadata": meta}, patch_type=PatchType.MERGE)
        except ApiError as exc:
            kind = NodeConflictError if exc.status.code == 409 else NodeApiError
            raise kind(f"annotating node {name}: {_why(exc)}") from None


def _why(exc: ApiError) -> str:
    status = exc.status
    return f"{status.code} {status.reason or ''}: {status.message or ''}".strip()
