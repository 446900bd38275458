"""A cluster ready to be a site of the plane: scheduler + xpupool's extender process + kwok (with
the Stage that completes a pod after its duration), and kwok Nodes of two A100s each.

    with kwok_site(tmp, "gpu-a", ("gpu-a-0",)) as (kc, ext):
        sites.yaml names kc.kubeconfig (or a secret holding a kubeconfig for it)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cluster import Extender, ExtenderProcess, K8sCluster, find_binaries, free_port
from test_plane_site_e2e import COMPLETE_STAGE, MANAGED, kwok_node


@contextmanager
def kwok_site(
    tmp: Path, name: str, nodes: Sequence[str], extender_args: tuple[str, ...] = ()
) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    """The cluster in ``tmp/name`` with ``nodes`` (kwok's, two A100s each); its extender's log
    is ``tmp/name-extender.log``, ``extender_args`` more of its command line. Everything stops
    on exit."""
    port = free_port()
    extender = Extender(url_prefix=f"http://127.0.0.1:{port}", managed_resources=MANAGED)
    with K8sCluster(tmp / name, extender=extender) as kc:
        bins = find_binaries(("kwok",))
        stages = tmp / f"{name}-kwok-stages.yaml"
        stages.write_text(bins["kwok-stages"].read_text() + COMPLETE_STAGE)
        kwok_port = free_port()
        comp = kc._spawn(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={kc.kubeconfig}",
                f"--config={stages}",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
        )
        kc._wait(comp, f"http://127.0.0.1:{kwok_port}/healthz")
        log = tmp / f"{name}-extender.log"
        ext = ExtenderProcess(kc.kubeconfig, port, log, extender_args).start()
        try:
            for node in nodes:
                r = kc.api.post("/api/v1/nodes", json=kwok_node(node))
                assert r.status_code == 201, r.text
            yield kc, ext
        finally:
            ext.stop()
