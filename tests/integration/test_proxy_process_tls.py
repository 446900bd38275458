"""The service proxy's own process over TLS, as ``xpupool up`` starts it: with ``--tls-cert`` and
``--tls-key`` the proxy's port (``--proxy-port``) speaks HTTPS with the API's certificate, so a
caller's token is never sent in the clear on one port while the other is encrypted. Behaviour
over TLS (streams, websockets) is in ``test_service_proxy_workers.py``; this checks that the real
``up`` hands the process its certificate."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, free_port, until

from tls_certs import client_context, make_certs

pytestmark = pytest.mark.slow


def test_up_with_tls_serves_the_proxy_port_over_https(tmp_path: Path) -> None:
    ca, cert, key = make_certs(tmp_path)
    proxy_port = free_port()
    args = ("--tls-cert", str(cert), "--tls-key", str(key), "--proxy-port", str(proxy_port))
    with (
        ServerProc(tmp_path / "data", ca=ca, extra_args=args) as srv,
        srv.tenant_client("team") as user,
    ):
        assert user.post("/v1/services", json={"name": "web", "job": {"command": ["true"]}})
        proxy = f"https://127.0.0.1:{proxy_port}/v1/services"
        trust = client_context(ca)

        def answer(name: str) -> httpx.Response | None:
            try:
                return httpx.get(f"{proxy}/{name}/proxy/", headers=user.headers, verify=trust)
            except httpx.TransportError:  # the process has not taken the socket up yet
                return None

        missing = until(lambda: answer("nope"), "the proxy process answering over TLS")
        assert missing.status_code == 404, missing.text
        # the service exists but has no ready replica: the proxy's own answer, over TLS
        until(
            lambda: (r := answer("web")) is not None and r.status_code == 503,
            "the service in the proxy's snapshot",
        )
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{proxy_port}/v1/services/web/proxy/", timeout=5)
        log = srv.log_path.read_text()
        assert f"service proxy: https://127.0.0.1:{proxy_port}/" in log
