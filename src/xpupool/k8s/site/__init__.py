"""A Kubernetes cluster as a site of the control plane (issue 49; docs/kubernetes.md, "Plane and
extender"): the sites file (``sites_file.py``), a job's replica as a Pod and a Pod's state as a
replica report (``pods.py``), and the site itself, its watches and its worker (``site.py``)."""

from __future__ import annotations

from pathlib import Path

from xpupool.k8s.site.site import KubernetesSite
from xpupool.k8s.site.sites_file import KubernetesSiteConfig, load_sites

__all__ = ["KubernetesSite", "KubernetesSiteConfig", "kubernetes_sites", "load_sites"]


def kubernetes_sites(path: str | Path) -> tuple[KubernetesSite, ...]:
    """The sites of the sites file at ``path``, in its order, not yet attached to a plane."""
    return tuple(KubernetesSite(config) for config in load_sites(path))
