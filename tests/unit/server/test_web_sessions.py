"""The dashboard's sessions and form guards in-process (no browser): the cookie's flags, what a
revoked token does to its sessions, the CSRF and origin checks, and the live request check."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from server_kit import Server, node, tenant

from xpupool.server.app import create_app
from xpupool.server.auth import token_hash

HERE = {"Origin": "http://testserver"}


@pytest.fixture(autouse=True)
def _no_redirects(server: Server) -> None:
    """The tests read the dashboard's redirects themselves."""
    server.client.follow_redirects = False


def _sign_in(client: TestClient, token: str, origin: str = "http://testserver") -> str:
    r = client.post("/signin", data={"token": token}, headers={"Origin": origin})
    assert r.status_code == 303, r.text
    return str(r.headers["set-cookie"])


def _csrf(client: TestClient) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/submit").text)
    assert found is not None
    return found.group(1)


def test_the_cookie_holds_a_session_id_never_the_token(server: Server) -> None:
    cookie = _sign_in(server.client, server.admin_token)
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    assert server.admin_token not in cookie
    assert token_hash(server.admin_token) not in cookie
    page = server.client.get("/")
    assert page.status_code == 200
    assert server.admin_token not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_over_tls_the_cookie_is_secure(server: Server) -> None:
    app = create_app(server.plane, background=False)
    with TestClient(app, base_url="https://x", follow_redirects=False) as c:
        cookie = _sign_in(c, server.admin_token, origin="https://x")
    assert "Secure" in cookie


def test_pages_need_a_session(server: Server) -> None:
    for path in ("/", "/devices", "/queues", "/jobs", "/submit"):
        r = server.client.get(path)
        assert (r.status_code, r.headers.get("location")) == (303, "/signin"), path
    assert server.client.get("/ui/overview").status_code == 401  # fragments: the script redirects


def test_a_revoked_token_ends_its_sessions(server: Server) -> None:
    token = tenant(server, "team")
    _sign_in(server.client, token)
    assert server.client.get("/jobs").status_code == 200
    listed = server.client.get("/v1/tokens", headers=server.admin).json()
    token_id = next(t["id"] for t in listed if t["tenant"] == "team")
    assert server.client.delete(f"/v1/tokens/{token_id}", headers=server.admin).status_code == 204
    r = server.client.get("/jobs")
    assert (r.status_code, r.headers.get("location")) == (303, "/signin")


def test_agent_tokens_and_unknown_tokens_cannot_sign_in(server: Server) -> None:
    r = server.client.post("/v1/tokens", json={"role": "agent"}, headers=server.admin)
    agent = r.json()["token"]
    for token, said in ((agent, "Agent and bootstrap tokens"), ("xpp_nope", "Unknown or revoked")):
        r = server.client.post("/signin", data={"token": token}, headers=HERE)
        assert r.status_code == 401
        assert said in r.text
        assert "set-cookie" not in r.headers


def test_a_sign_in_from_another_origin_is_refused(server: Server) -> None:
    r = server.client.post(
        "/signin", data={"token": server.admin_token}, headers={"Origin": "http://evil.test"}
    )
    assert r.status_code == 403
    assert "set-cookie" not in r.headers


def test_forms_need_the_csrf_secret_and_this_origin(server: Server) -> None:
    node(server, "n1")
    _sign_in(server.client, server.admin_token)
    csrf = _csrf(server.client)
    path = "/nodes/n1/cordon"
    cases = [
        ({"csrf": csrf}, {"Origin": "http://evil.test"}),  # right secret, wrong origin
        ({"csrf": csrf}, {}),  # neither Origin nor Referer
        ({"csrf": "guess"}, HERE),  # this origin, wrong secret
        ({"back": "/"}, HERE),  # no secret
    ]
    for form, headers in cases:
        r = server.client.post(path, data=form, headers=headers)
        assert r.status_code == 403, (form, headers)
        assert server.client.get("/v1/nodes/n1", headers=server.admin).json()["schedulable"]
    r = server.client.post(
        path, data={"csrf": csrf}, headers={"Referer": "http://testserver/devices"}
    )
    assert r.status_code == 303
    assert not server.client.get("/v1/nodes/n1", headers=server.admin).json()["schedulable"]
    audit = server.client.get("/v1/audit", headers=server.admin).json()
    mine = [a for a in audit if a["action"] == "cordon_node_form"]
    assert {a["target"] for a in mine} == {"name=n1, verb=cordon"}
    assert sorted(a["status"] for a in mine) == [303, 403, 403, 403, 403]  # refusals too


def test_a_tenant_cannot_cordon(server: Server) -> None:
    node(server, "n1")
    _sign_in(server.client, tenant(server, "team"))
    r = server.client.post("/nodes/n1/cordon", data={"csrf": _csrf(server.client)}, headers=HERE)
    assert r.status_code == 403
    assert server.client.get("/v1/nodes/n1", headers=server.admin).json()["schedulable"]


def test_the_live_check_is_the_apis_parser(server: Server) -> None:
    _sign_in(server.client, tenant(server, "team"))
    bad = server.client.get("/ui/validate", params={"request": "A100 mem=24Gx"}).json()
    assert bad["ok"] is False
    assert bad["field"] == "request.devices.memory"
    api = server.client.post(
        "/v1/jobs",
        json={"request": "A100 mem=24Gx", "command": ["true"]},
        headers=server.as_(tenant(server, "other")),
    ).json()
    assert (api["field"], api["reason"]) == (bad["field"], bad["reason"])
    assert server.client.get("/ui/validate", params={"request": "A100 mem=24Gi"}).json() == {
        "ok": True
    }


def test_the_submit_form_puts_errors_next_to_their_field(server: Server) -> None:
    _sign_in(server.client, tenant(server, "team"))
    csrf = _csrf(server.client)
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "x", "request": "A100 mem=24Gx", "command": "echo 'unclosed"},
        headers=HERE,
    )
    assert r.status_code == 422
    assert re.search(r'id="command-error"[^>]*>cannot split into arguments', r.text)
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "x", "request": "A100 mem=24Gx", "command": "echo hi"},
        headers=HERE,
    )
    assert re.search(r'id="request-error"[^>]*>request.devices.memory: unknown memory unit', r.text)
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


def test_the_model_picker_offers_the_catalog_and_answers_at_its_field(server: Server) -> None:
    _sign_in(server.client, tenant(server, "team"))
    form = server.client.get("/submit").text
    assert "<option>qwen2.5-7b</option>" in form
    csrf = _csrf(server.client)
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "m", "model": "qwen2.5-7b", "task": "serve", "request": "L20"},
        headers=HERE,
    )
    assert r.status_code == 422
    assert re.search(
        r'id="request-error"[^>]*>request: give .*model.* or .*request.*, not both', r.text
    )
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "m", "model": "qwen2.5-7b", "task": "serve"},
        headers=HERE,
    )
    assert re.search(
        r'id="model-error"[^>]*>model.name: no card type of the pool can serve', r.text
    )
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


def test_signing_in_again_replaces_the_session(server: Server) -> None:
    first = _sign_in(server.client, server.admin_token).split(";")[0]
    second = _sign_in(server.client, server.admin_token).split(";")[0]
    assert first != second
    server.client.cookies.clear()
    sid = first.split("=", 1)[1]
    r = server.client.get("/jobs", cookies={"xpupool_session": sid})
    assert (r.status_code, r.headers.get("location")) == (303, "/signin")
