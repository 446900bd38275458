"""A service as its users meet it, every part real: ``xpupool up`` with its in-process agent runs
each replica on podman (the locally built image of the Go stub of an OpenAI-compatible server,
on the node port its agent picked), the controller probes them, and callers go through the stable endpoint
``/v1/services/NAME/proxy/...``. The parts are tested alone elsewhere (test_services.py, the
controller; test_service_proxy.py, the proxy over fixed endpoints); here they meet: a replica is
reached only once ready, load in flight scales the service up, and its end scales it down
through a drain, with the requests per second ``xpupool services`` shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until

from container_images import ensure_stub_image, require_podman

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]


CLUSTER = """\
nodes:
  - {name: box, cpu: 8, memory: 16Gi, runtime: podman}
"""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[ServerProc, httpx.Client, dict[str, str]]]:
    require_podman()
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    args = ("--heartbeat", "0.2", "--lost-after", "3")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONTAINERS_CONF", raising=False)  # the product's defaults, nothing of ours
        srv = ServerProc(
            tmp_path / "data", cluster=tmp_path / "cluster.yaml", agent=True, extra_args=args
        )
        with srv:
            user = srv.tenant_client("team")
            token = user.headers["Authorization"].removeprefix("Bearer ")
            env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token}
            with user:
                yield srv, user, env


def _service(user: httpx.Client, name: str) -> dict[str, Any]:
    r = user.get(f"/v1/services/{name}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_served_model_is_reached_when_ready_and_scales_with_its_load(
    up: tuple[ServerProc, httpx.Client, dict[str, str]],
) -> None:
    srv, user, env = up
    image = ensure_stub_image()  # its entry point serves on $PORT, the node port it is given
    body = {
        "name": "chat",
        "job": {"image": image, "spec": "cpu=100m", "env": {"READY_AFTER_S": "2"}},
        "replicas": {"min": 1, "max": 2},
        "readiness": {"path": "/health", "interval_s": 0.5, "timeout_s": 0.5},
        "scaling": {"target_in_flight": 1, "window_s": 2, "drain_timeout_s": 30},
    }
    r = user.post("/v1/services", json=body)
    assert r.status_code == 201, r.text
    proxy = "/v1/services/chat/proxy"

    # not ready yet (its /health answers 503 for 2 s): the endpoint says so, it never guesses
    first = user.get(f"{proxy}/v1/models")
    assert first.status_code == 503 and "no ready replica" in first.text, first.text
    assert first.headers.get("retry-after"), first.headers
    until(lambda: _service(user, "chat")["state"] == "ready", "service chat ready", 120)
    models = user.get(f"{proxy}/v1/models")
    assert models.status_code == 200 and models.json()["object"] == "list", models.text

    # a streamed completion comes through as server-sent events, the tenant's token stripped
    with user.stream(
        "POST", f"{proxy}/v1/completions", json={"model": "m", "prompt": "hi", "stream": True}
    ) as streamed:
        events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > 2, events
    seen = user.get(f"{proxy}/headers").json()
    assert not any(k.lower() == "authorization" for k in seen["headers"]), seen

    # its replicas' logs, each line prefixed with the replica's job name (a name, not an id)
    logs = subprocess.run(
        [*CLI, "logs", "chat"], env=env, capture_output=True, text=True, timeout=60
    )
    assert logs.returncode == 0, logs.stderr
    assert "[chat-1] " in logs.stdout and "stub listening on" in logs.stdout, logs.stdout

    # three slow requests in flight on one replica, target 1 per replica: a second replica
    results: list[int] = []

    def slow() -> None:
        with httpx.Client(base_url=srv.url, headers=user.headers, timeout=60) as c:
            results.append(c.get(f"{proxy}/slow", params={"ms": "6000"}).status_code)

    callers = [threading.Thread(target=slow) for _ in range(3)]
    for t in callers:
        t.start()
    grown = until(
        lambda: (s := _service(user, "chat"))["desired"] == 2 and len(s["replicas"]) == 2 and s,
        "a second replica for the load",
        30,
    )
    assert grown["desired"] == 2
    for t in callers:
        t.join(60)
    assert results == [200, 200, 200]

    # the load over, after the window: back to one, the one taken away drained, then stopped
    shrunk = until(
        lambda: (
            (s := _service(user, "chat"))["desired"] == 1
            and [x for x in s["replicas"] if x["state"] in ("scheduled", "running")]
            and len([x for x in s["replicas"] if not x["draining"]]) == 1
            and s
        ),
        "scaled back to one replica",
        60,
    )
    reasons = " ".join(e["reason"] for e in shrunk["events"])
    assert "drain" in reasons, reasons
    assert user.get(f"{proxy}/v1/models").status_code == 200  # the one left serves on

    listed = subprocess.run(
        [*CLI, "services", "-o", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["name"] == "chat" and row["url"] == "/v1/services/chat/proxy/", row
    assert row["requests_per_s"] > 0, row
