"""What the extender's in-process tests share: a Kubernetes API that holds pods and accepts
annotations and binds without a server, a decoder for views fed by hand, and a pod asking one
card's memory."""

from __future__ import annotations

import copy
from typing import Any

from xpupool.k8s.extender.verbs import PodGoneError


class ApiPods:
    """The pods an apiserver holds, by namespace and name: bind reads its pod from the API
    (never from a filter body), so a test adds the pods it binds."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.add(*pods)

    def add(self, *pods: dict[str, Any]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            self.pods[(meta.get("namespace", ""), meta["name"])] = copy.deepcopy(pod)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self.pods[(namespace, name)])
        except KeyError:
            raise PodGoneError(f"pod {namespace}/{name}: 404 NotFound") from None


class QuietApi(ApiPods):
    """Holds pods, annotates and binds without an apiserver."""

    def annotate_pod(self, *args: object) -> None:
        pass

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        pass


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def gpumem_pod(name: str, gpumem_mib: int) -> dict[str, Any]:
    """A pod in namespace ``ns`` asking one card with ``gpumem_mib`` MiB of it (HAMi's resources)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(gpumem_mib)}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
