"""The stub server as a container image (``localhost/xpupool-test/stub:<hash>``, FROM scratch: the
static binary alone, imported by ``tests/container_images.py``, which CI's image stage runs), on
the real engine with the agent's podman configuration: it starts, listens on ``$PORT``, and
answers as an OpenAI-compatible server, so a service's replicas can be this image."""

from __future__ import annotations

import json

import httpx
from server_proc import free_port, until

from container_images import ensure_stub_image, podman, require_podman


def test_the_stub_image_serves_on_its_port() -> None:
    require_podman()
    image = ensure_stub_image()
    port = free_port()
    name = f"xpupool-test-stub-{port}"
    started = podman(
        "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:8000",
        "-e", "PORT=8000", "-e", "STUB_NAME=image", image,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        until(healthy, "the stub container answering")
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
        assert r.headers["x-stub"] == "image"
        assert json.loads(r.text)["data"][0]["id"] == "stub"
    finally:
        podman("rm", "-f", name)
