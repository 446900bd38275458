"""A cache volume shared by a service's replicas on a real container engine (podman, the Go
stub's image): the admin declares the volume (a directory of the node), the service's job mounts
it by name, and what one replica writes there the other reads, without either naming a path of
the host (issue 47's model cache; a model service mounts ``xpupool up --model-cache VOLUME`` at
its runtime's cache path by the same mount, ``services/model_cache.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until

from container_images import ensure_stub_image, require_podman

CLUSTER = """\
nodes:
  - {name: box, cpu: 8, memory: 16Gi, runtime: podman}
"""


def _service(user: httpx.Client) -> dict[str, Any]:
    r = user.get("/v1/services/cached")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_two_replicas_on_a_node_share_what_one_wrote_in_the_cache(tmp_path: Path) -> None:
    require_podman()
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    cache = tmp_path / "models"
    cache.mkdir()
    cache.chmod(0o777)  # a cache every tenant's replicas write: each runs as a uid of its own
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONTAINERS_CONF", raising=False)  # the product's defaults, nothing of ours
        srv = ServerProc(
            tmp_path / "data",
            cluster=tmp_path / "cluster.yaml",
            agent=True,
            extra_args=("--heartbeat", "0.2"),
        )
        with srv, srv.tenant_client("team") as user:
            admin = httpx.Client(base_url=srv.url, headers=srv.headers())
            admin.put("/v1/volumes/models", json={"path": str(cache)}).raise_for_status()
            body = {
                "name": "cached",
                "job": {
                    "image": ensure_stub_image(),
                    "spec": "cpu=100m",
                    "volumes": [{"name": "models", "path": "/cache"}],
                    "env": {"STUB_CACHE_DIR": "/cache"},
                },
                "replicas": {"min": 2, "max": 2},
                "readiness": {"path": "/health", "interval_s": 0.5, "timeout_s": 0.5},
            }
            r = user.post("/v1/services", json=body)
            assert r.status_code == 201, r.text
            until(
                lambda: len([x for x in _service(user)["replicas"] if x["ready"]]) == 2,
                "two ready replicas",
                120,
            )
            one, two = [f"http://{x['host']}:{x['port']}" for x in _service(user)["replicas"]]
            assert one != two
            put = httpx.put(f"{one}/cache", params={"name": "weights"}, content=b"w" * 1000)
            assert put.status_code == 204, put.text
            got = httpx.get(f"{two}/cache", params={"name": "weights"})
            assert got.status_code == 200 and got.content == b"w" * 1000, got.text
            assert (cache / "weights").read_bytes() == b"w" * 1000  # the node's directory
            assert user.delete("/v1/services/cached").status_code in (200, 202, 204)
            until(lambda: user.get("/v1/jobs?state=running").json() == [], "the replicas end", 60)
            admin.close()
