"""What the extender's in-process tests share: a Kubernetes API that accepts annotations and
binds without a server, a decoder for views fed by hand, and a pod asking one card's memory."""

from __future__ import annotations

from typing import Any


class QuietApi:
    """Annotates and binds without an apiserver; filter keeps the pod, so none is read."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        raise AssertionError("not used: filter kept the pod")

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
