"""TLS between agents and the server (issue 18, item 2): ``xpupool up --tls-cert/--tls-key`` serves
HTTPS, ``xpupool agent --ca`` verifies it, an agent without the CA stops with a clear TLS error.

The certificates are made in the test with ``openssl``: a throwaway CA and a server certificate
for 127.0.0.1 signed by it. A real server and real agents run as subprocesses.
"""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_node_identity import CLI, PROTOCOL, register_body, start_agent

from tls_certs import make_certs


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Path]]:
    """The server over TLS: agents register and heartbeat through it."""
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certs(folder / "certs")
    srv = ServerProc(
        folder / "data",
        extra_args=(*("--tls-cert", str(cert), "--tls-key", str(key), "--heartbeat", "0.3"),),
        ca=ca,
    )
    srv.start()
    try:
        yield srv, ca
    finally:
        srv.stop()


def test_the_server_speaks_https_only(tls: tuple[ServerProc, Path]) -> None:
    srv, ca = tls
    assert srv.url.startswith("https://")
    context = ssl.create_default_context(cafile=str(ca))
    assert httpx.get(f"{srv.url}/healthz", verify=context).status_code == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{srv.url}/healthz")
    plain = srv.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{plain}/healthz", timeout=5)
    assert "plain http" not in srv.log().lower()


def test_an_agent_with_the_ca_registers_and_heartbeats(
    tls: tuple[ServerProc, Path], tmp_path: Path
) -> None:
    srv, ca = tls
    context = ssl.create_default_context(cafile=str(ca))
    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), verify=context, timeout=30)
    token = admin.post("/v1/tokens", json={"role": "agent", "node": "tls-1"}).json()["token"]
    proc, log = start_agent(srv.url, "tls-1", token, tmp_path / "a", extra=("--ca", str(ca)))
    try:
        node = until(
            lambda: (r := admin.get("/v1/nodes/tls-1")).status_code == 200 and r.json(),
            f"tls-1 registered over TLS ({log.read_text()[-2000:]})",
        )
        until(
            lambda: admin.get("/v1/nodes/tls-1").json()["last_heartbeat"] != node["last_heartbeat"],
            "a heartbeat over TLS",
        )
    finally:
        stop_process(proc)


def test_an_agent_without_the_ca_stops_with_a_tls_error(
    tls: tuple[ServerProc, Path], tmp_path: Path
) -> None:
    srv, ca = tls
    context = ssl.create_default_context(cafile=str(ca))
    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), verify=context, timeout=30)
    token = admin.post("/v1/tokens", json={"role": "agent", "node": "tls-2"}).json()["token"]
    proc, log = start_agent(srv.url, "tls-2", token, tmp_path / "b")
    try:
        code = proc.wait(60)
    finally:
        stop_process(proc)
    out = log.read_text()
    assert code != 0, out
    assert "certificate" in out and "--ca" in out, out
    assert "Traceback" not in out
    assert admin.get("/v1/nodes/tls-2").status_code == 404


def test_the_cli_client_verifies_with_xpupool_ca(
    tls: tuple[ServerProc, Path], tmp_path: Path
) -> None:
    srv, ca = tls
    env = {
        **os.environ,
        "XPUPOOL_URL": srv.url,
        "XPUPOOL_TOKEN": srv.admin_token,
        "HOME": str(tmp_path),
    }
    env.pop("XPUPOOL_CA", None)
    refused = subprocess.run([*CLI, "nodes"], env=env, capture_output=True, timeout=60)
    assert refused.returncode != 0
    assert b"certificate" in refused.stdout + refused.stderr
    trusted = subprocess.run(
        [*CLI, "nodes"], env={**env, "XPUPOOL_CA": str(ca)}, capture_output=True, timeout=60
    )
    assert trusted.returncode == 0, trusted.stderr


def test_plain_http_on_a_public_address_warns_in_one_line() -> None:
    from xpupool.server.up import plain_http_warning

    assert plain_http_warning("127.0.0.1", tls=False) is None
    assert plain_http_warning("localhost", tls=False) is None
    assert plain_http_warning("::1", tls=False) is None
    assert plain_http_warning("0.0.0.0", tls=True) is None
    for host in ("0.0.0.0", "10.0.0.7", "::"):
        line = plain_http_warning(host, tls=False)
        assert line is not None and "\n" not in line
        assert host in line and "--tls-cert" in line


def test_register_over_tls_with_the_protocol_header(tls: tuple[ServerProc, Path]) -> None:
    srv, ca = tls
    context = ssl.create_default_context(cafile=str(ca))
    admin = httpx.Client(base_url=srv.url, headers=srv.headers(), verify=context, timeout=30)
    token = admin.post("/v1/tokens", json={"role": "agent", "node": "tls-3"}).json()["token"]
    r = httpx.post(
        f"{srv.url}/v1/agent/register",
        json=register_body("tls-3", ["GPU-tls-0"]),
        headers={"Authorization": f"Bearer {token}", **PROTOCOL},
        verify=context,
    )
    assert r.status_code == 200, r.text


def test_a_browser_signs_in_over_https_and_gets_a_secure_cookie(
    tls: tuple[ServerProc, Path],
) -> None:
    """A browser's sign-in carries the page's own ``https://`` Origin: it is this server, and
    the session cookie is ``Secure``. Another origin, or the
    ``http://`` one, is still refused, and a client cannot claim a scheme by a header."""
    srv, _ = tls
    here = f"https://127.0.0.1:{srv.port}"
    form = {"token": srv.admin_token}
    with httpx.Client(base_url=srv.url, verify=srv.verify) as browser:
        signed = browser.post("/signin", data=form, headers={"Origin": here})
        assert signed.status_code == 303, signed.text
        cookie = signed.headers["set-cookie"]
        assert "secure" in cookie.lower().split("; "), cookie
        for origin in (f"http://127.0.0.1:{srv.port}", "https://evil.example"):
            refused = browser.post("/signin", data=form, headers={"Origin": origin})
            assert refused.status_code == 403, (origin, refused.text)
        claimed = browser.post(
            "/signin",
            data=form,
            headers={"Origin": f"http://127.0.0.1:{srv.port}", "X-Xpupool-Scheme": "http"},
        )
        assert claimed.status_code == 403, claimed.text
