"""Image jobs at the server: refused at submit when no node can run them, with the reason; placed
only on nodes whose agent reported a container runtime; a job with neither a command nor an image
is refused naming ``command``. The node's runtime is stored and survives a restart."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import L20, Server, job, node, node_body, open_server, row_counts, tenant

IMAGE_JOB = {"image": "registry.example/train:1", "command": ["python", "train.py"]}


def _post(server: Server, token: str, body: dict[str, Any]) -> Any:
    return server.client.post("/v1/jobs", json=body, headers=server.as_(token))


def test_image_job_is_refused_when_no_node_has_a_runtime(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    before = row_counts(server)
    r = _post(server, a, {**IMAGE_JOB, "spec": "A100:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image" and "container runtime" in r.json()["reason"]
    assert row_counts(server) == before


def test_neither_command_nor_image_is_422_naming_command(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    r = _post(server, a, {"spec": "A100:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "command"
    r = _post(server, a, {"spec": "A100:1", "image": " ", "command": ["true"]})
    assert r.status_code == 422 and r.json()["field"] == "image"


def test_an_image_that_is_not_a_reference_is_422_and_stores_nothing(server: Server) -> None:
    """Issue 43: ``--privileged`` as the image reached ``docker run`` as an option."""
    node(server, "boxes", runtime="podman")
    a = tenant(server, "a")
    before = row_counts(server)
    for image in ("--privileged", "-v=/:/host", "Busybox", "busybox:", "a b"):
        r = _post(server, a, {"spec": "A100:1", "image": image, "command": ["id"]})
        assert r.status_code == 422, (image, r.text)
        body = r.json()
        assert body["field"] == "image" and "not an image reference" in body["reason"], body
    assert row_counts(server) == before
    r = _post(server, a, {"spec": "A100:1", "image": "localhost:5000/team/img:1", "command": []})
    assert r.status_code == 201, r.text


@pytest.mark.slow
def test_image_job_goes_only_to_a_node_with_a_runtime(server: Server) -> None:
    node(server, "plain")  # A100s, no runtime
    node(server, "boxes", count=1, model=L20, memory_mib=46068, runtime="docker")
    a = tenant(server, "a")
    r = _post(server, a, {**IMAGE_JOB, "spec": "A100:1"})  # the A100s can never run it
    assert r.status_code == 422 and r.json()["field"] == "image", r.text
    r = _post(server, a, {**IMAGE_JOB, "spec": "L20:1"})
    placed = r.json()["id"]
    r = _post(server, a, {**IMAGE_JOB, "spec": "L20:1"})  # the one L20 is taken: it waits
    waiting = r.json()["id"]
    server.schedule()
    assert job(server, placed)["assignments"][0]["node"] == "boxes"
    pending = job(server, waiting)
    assert pending["state"] == "pending"
    assert "1 no container runtime" in pending["reason"], pending["reason"]
    r = _post(server, a, {"command": ["true"], "spec": "A100:1"})  # a command goes anywhere
    server.schedule()
    assert job(server, r.json()["id"])["assignments"][0]["node"] == "plain"


@pytest.mark.slow
def test_runtime_is_shown_stored_and_checked(server: Server) -> None:
    node(server, "boxes", runtime="podman")
    node(server, "plain")
    shown = {
        n["name"]: n["runtime"] for n in server.client.get("/v1/nodes", headers=server.admin).json()
    }
    assert shown == {"boxes": "podman", "plain": None}
    bad = node_body("n3", runtime="lxc")
    r = server.client.post("/v1/agent/register", json=bad, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "runtime"
    a = tenant(server, "a")
    held = _post(server, a, {**IMAGE_JOB, "spec": "A100:1", "request": None}).json()["id"]
    plane, _ = open_server(server.data, server.clock)  # a restart reads the same store
    try:
        assert plane.node_records["boxes"].node.container_runtime == "podman"
        assert plane.node_records["plain"].node.container_runtime is None
        assert plane.queued[held].request.container  # still waits for a runtime node
    finally:
        plane.db.dispose()


def test_a_port_is_checked_at_the_edge_and_kept(server: Server) -> None:
    """Issue 47: ``port`` N names a port inside an image's container; a host process listens on
    the port its agent picks (port 0). Refusals name the field and store nothing."""
    node(server, "boxes", runtime="podman")
    a = tenant(server, "a")
    before = row_counts(server)
    for body, why in (
        ({"command": ["serve"], "port": 8000}, "give port 0"),
        ({"command": ["serve"], "port": 65536}, "65535"),
        ({"command": ["serve"], "port": -1}, "0"),
    ):
        r = _post(server, a, {"spec": "A100:1", **body})
        assert r.status_code == 422, (body, r.text)
        assert r.json()["field"] == "port" and why in r.json()["reason"], r.json()
    assert row_counts(server) == before
    host = _post(server, a, {"spec": "A100:1", "command": ["serve"], "port": 0})
    assert host.status_code == 201 and host.json()["port"] == 0, host.text
    image = _post(server, a, {"spec": "A100:1", "image": "vllm/vllm:1", "port": 8000})
    assert image.status_code == 201 and image.json()["port"] == 8000, image.text
    got = server.client.get(f"/v1/jobs/{image.json()['id']}", headers=server.as_(a))
    assert got.json()["port"] == 8000
