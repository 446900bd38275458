"""A service of an image on a real container engine (podman, the locally built busybox image):
the server in the container listens on its own port (``port: 8000``), the agent publishes it on a
node port of its choosing, and the controller probes and reports that node port, never 8000."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until

from container_images import busybox_image, require_podman

__all__ = ["busybox_image"]  # a fixture, used by name

CLUSTER = """\
nodes:
  - {name: box, cpu: 4, memory: 8Gi, runtime: podman}
"""
# an HTTP server of busybox's sh and nc: every connection gets one 200 answer
SERVE = "while true; do printf 'HTTP/1.0 200 OK\\r\\n\\r\\nok' | nc -l -p 8000; done"


@pytest.fixture
def user(tmp_path: Path, busybox_image: str) -> Iterator[httpx.Client]:
    require_podman()
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONTAINERS_CONF", raising=False)  # the product's defaults, nothing of ours
        args = ("--heartbeat", "0.2")
        srv = ServerProc(tmp_path / "data", cluster=tmp_path / "cluster.yaml", agent=True,
                         extra_args=args)  # fmt: skip
        with srv, srv.tenant_client("team") as client:
            yield client


def test_an_image_service_is_reached_on_the_node_port_its_agent_picked(
    user: httpx.Client, busybox_image: str
) -> None:
    job = {"image": busybox_image, "command": ["sh", "-c", SERVE], "spec": "cpu=100m"}
    body = {"name": "box", "job": job, "port": 8000, "readiness": {"path": "/health"}}
    r = user.post("/v1/services", json=body)
    assert r.status_code == 201, r.text

    def ready() -> dict[str, Any] | None:
        got = dict(user.get("/v1/services/box").json())
        return got if got["state"] == "ready" else None

    got = until(ready, "the image service ready", 120)
    (one,) = got["replicas"]
    assert one["ready"] and one["port"] not in (None, 8000), one
    assert httpx.get(f"http://127.0.0.1:{one['port']}/", timeout=5).text == "ok"
    assert user.get(f"/v1/jobs/{one['job_id']}").json()["port"] == 8000
    assert user.delete("/v1/services/box").status_code == 204
    until(
        lambda: user.get(f"/v1/jobs/{one['job_id']}").json()["state"] == "cancelled",
        "the replica stopped",
        120,
    )
