"""An image job whose cards are only on nodes without a container runtime can never start: it is
refused at submission naming the runtime and where the runtimes are (issue 42 part 3)."""

from __future__ import annotations

import pytest
from server_kit import Server, node, tenant


@pytest.mark.slow
def test_image_job_for_cards_without_a_runtime_is_refused(server: Server) -> None:
    node(server, "a100s", count=8)  # no runtime
    node(server, "h100s", count=2, model="NVIDIA H100 80GB HBM3", runtime="podman")
    token = tenant(server, "a")
    body = {"spec": "A100:1", "image": "busybox:1.36", "command": ["true"]}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 422, r.text
    answer = r.json()
    assert answer["field"] == "image", answer
    assert "no node with NVIDIA A100-SXM4-80GB cards has a container runtime" in answer["reason"]
    assert "h100s (NVIDIA H100 80GB HBM3)" in answer["reason"]
    assert server.client.get("/v1/jobs", headers=server.as_(token)).json() == []  # nothing kept
    body["spec"] = "H100:1"
    assert server.client.post("/v1/jobs", json=body, headers=server.as_(token)).status_code == 201
