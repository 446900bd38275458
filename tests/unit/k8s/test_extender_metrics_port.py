"""The extender's metrics port behind ``--metrics-token-file`` (issue 43 item 14): ``/metrics``
needs the bearer token, while ``/healthz`` and ``/readyz`` stay open, since a kubelet's probe
sends no token (nor a client certificate)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from xpupool.k8s.extender.http_app import ExtenderMetrics, serve_metrics


@pytest.mark.slow
def test_only_metrics_need_the_token_the_probes_do_not(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    registry = CollectorRegistry()
    ExtenderMetrics(registry)
    server = serve_metrics(registry, "127.0.0.1", 0, lambda: (503, "not synced"), token)
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert httpx.get(f"{base}/metrics").status_code == 401
        wrong = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        r = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200 and "xpupool_extender_calls" in r.text
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 503
    finally:
        server.stop()
