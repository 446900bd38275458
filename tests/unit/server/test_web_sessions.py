"""The dashboard's sessions and form guards in-process (no browser): the cookie's flags, what a
revoked token does to its sessions, the CSRF and origin checks, and the live request check."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from server_kit import BOTH_STORES, Server, node, reopen, tenant
from sqlalchemy import select

from xpupool.server.app import create_app
from xpupool.server.auth import token_hash
from xpupool.server.storage.web_sessions import web_sessions
from xpupool.server.web.sessions import SESSION_TTL_S

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_over_tls_the_cookie_is_secure(server: Server) -> None:
    app = create_app(server.plane, background=False)
    with TestClient(app, base_url="https://x", follow_redirects=False) as c:
        cookie = _sign_in(c, server.admin_token, origin="https://x")
    assert "Secure" in cookie


@pytest.mark.slow
def test_pages_need_a_session(server: Server) -> None:
    for path in ("/", "/devices", "/queues", "/jobs", "/submit"):
        r = server.client.get(path)
        assert (r.status_code, r.headers.get("location")) == (303, "/signin"), path
    assert server.client.get("/ui/overview").status_code == 401  # fragments: the script redirects


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_sign_in_from_another_origin_is_refused(server: Server) -> None:
    r = server.client.post(
        "/signin", data={"token": server.admin_token}, headers={"Origin": "http://evil.test"}
    )
    assert r.status_code == 403
    assert "set-cookie" not in r.headers


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_tenant_cannot_cordon(server: Server) -> None:
    node(server, "n1")
    _sign_in(server.client, tenant(server, "team"))
    r = server.client.post("/nodes/n1/cordon", data={"csrf": _csrf(server.client)}, headers=HERE)
    assert r.status_code == 403
    assert server.client.get("/v1/nodes/n1", headers=server.admin).json()["schedulable"]


def _live(server: Server, csrf: str, **form: str) -> dict[str, object]:
    """The form's check as you type: the page posts the whole form, CSRF secret included."""
    r = server.client.post("/ui/validate", data={"csrf": csrf, **form}, headers=HERE)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    return dict(r.json())


@pytest.mark.slow
def test_the_live_check_is_the_apis_parser(server: Server) -> None:
    node(server, "n1")
    _sign_in(server.client, tenant(server, "team"))
    csrf = _csrf(server.client)
    bad = _live(server, csrf, request="A100 mem=24Gx")
    assert bad["ok"] is False
    assert (bad["field"], bad["at"]) == ("request.devices.memory", "request")
    api = server.client.post(
        "/v1/jobs",
        json={"request": "A100 mem=24Gx", "command": ["true"]},
        headers=server.as_(tenant(server, "other")),
    ).json()
    assert (api["field"], api["reason"]) == (bad["field"], bad["reason"])
    assert _live(server, csrf, request="A100 mem=24Gi") == {"ok": True}


@pytest.mark.slow
def test_the_live_check_is_the_submissions_verdict(server: Server) -> None:
    """As you type, the form hears what a submission would: a request nothing in the pool could
    ever hold, a priority above the queue's cap, an image no node could run; each at its field,
    in the API's words, and nothing stored. A command not typed yet is not asked about."""
    node(server, "n1")  # 8 A100s, no container runtime
    token = tenant(server, "team")
    _sign_in(server.client, token)
    csrf = _csrf(server.client)
    cases = [
        ({"request": "A100:9"}, {"request": "A100:9", "command": ["true"]}, "request"),
        ({"request": "A100:1", "priority": "5"}, {"priority": 5, "command": ["true"]}, "priority"),
        ({"image": "busybox:1"}, {"image": "busybox:1"}, "image"),
    ]
    for form, body, at in cases:
        live = _live(server, csrf, **form)
        api = server.client.post("/v1/jobs", json=body, headers=server.as_(token)).json()
        assert live["ok"] is False, form
        assert (live["field"], live["reason"], live["at"]) == (api["field"], api["reason"], at)
    assert "nothing in the pool can hold it" in str(_live(server, csrf, request="A100:9")["reason"])
    assert _live(server, csrf, request="A100:8") == {"ok": True}  # no command yet: fine so far
    refused = server.client.post("/ui/validate", data={"request": "A100:9"}, headers=HERE)
    assert refused.status_code == 403  # a POST like every form's: the CSRF secret and this origin
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


@pytest.mark.slow
def test_the_admins_live_checks_write_no_audit_rows(server: Server) -> None:
    """The check as you type is a POST (its text stays out of URLs) that changes nothing: an admin
    typing must not fill the audit log, while the admin's submit is audited."""
    node(server, "n1")
    tenant(server, "team")
    _sign_in(server.client, server.admin_token)
    csrf = _csrf(server.client)
    for typed in ("A", "A1", "A100", "A100:9"):
        _live(server, csrf, request=typed, tenant="team")
    form = {"csrf": csrf, "request": "A100:1", "command": "true", "tenant": "team"}
    assert server.client.post("/submit", data=form, headers=HERE).status_code == 303
    audit = server.client.get("/v1/audit", headers=server.admin).json()
    assert [a["action"] for a in audit if a["action"] in ("validate_form", "submit_form")] == [
        "submit_form"
    ]


@pytest.mark.slow
def test_the_form_submits_image_env_priority_and_retries(server: Server) -> None:
    node(server, "n1", runtime="podman")
    _sign_in(server.client, tenant(server, "team"))
    csrf = _csrf(server.client)
    form = {
        "csrf": csrf,
        "name": "full",
        "request": "A100:1",
        "image": "busybox:1",
        "command": "sh -c 'echo $GREETING'",
        "env": "GREETING=hello there\r\n\r\nEXTRA=a=b\n",
        "priority": "-2",
        "max_retries": "3",
        "retry_on": "exit_nonzero, preempted",
    }
    r = server.client.post("/submit", data=form, headers=HERE)
    assert r.status_code == 303, r.text
    job_id = int(r.headers["location"].rsplit("/", 1)[1])
    api = server.client.get(f"/v1/jobs/{job_id}", headers=server.admin).json()
    assert api["image"] == "busybox:1"
    assert api["command"] == ["sh", "-c", "echo $GREETING"]
    assert api["env"] == {"GREETING": "hello there", "EXTRA": "a=b"}
    assert (api["priority"], api["max_retries"]) == (-2, 3)
    assert api["retry_on"] == ["exit_nonzero", "preempted"]
    page = server.client.get(f"/jobs/{job_id}").text  # the env back, as the API gives it
    rows = re.findall(r'<tr data-env="([^"]*)"><th scope="row">([^<]*)</th><td>([^<]*)</td>', page)
    assert rows == [("EXTRA", "EXTRA", "a=b"), ("GREETING", "GREETING", "hello there")]
    assert "exit_nonzero, preempted" in page


@pytest.mark.slow
def test_the_new_fields_answer_at_their_field_and_keep_what_was_typed(server: Server) -> None:
    node(server, "n1")
    _sign_in(server.client, tenant(server, "team"))
    csrf = _csrf(server.client)
    base = {"csrf": csrf, "name": "x", "request": "A100:1", "command": "true"}
    cases = [
        ({"env": "A=1\nNOVALUE"}, "env", "env: line 2: use KEY=VALUE"),
        ({"env": "=1"}, "env", "env: line 1: use KEY=VALUE"),
        ({"priority": "high"}, "priority", "priority: Input should be a valid integer"),
        ({"priority": "9"}, "priority", "priority: queue &#39;team&#39; takes priorities up to 0"),
        ({"max_retries": "-1"}, "max_retries", "max_retries: Input should be greater than"),
        ({"retry_on": "sometimes"}, "retry_on", "retry_on[0]: Input should be"),
        ({"image": "--privileged"}, "image", "image: not an image reference"),
    ]
    for extra, at, said in cases:
        r = server.client.post("/submit", data=base | extra, headers=HERE)
        assert r.status_code == 422, extra
        assert re.search(rf'id="{at}-error"[^>]*>{re.escape(said)}', r.text), (extra, r.text)
    r = server.client.post("/submit", data=base | {"env": "A=1\nNOVALUE"}, headers=HERE)
    assert re.search(r'<textarea id="env" name="env"[^>]*>A=1\nNOVALUE</textarea>', r.text)
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


@pytest.mark.slow
def test_the_submit_form_puts_errors_next_to_their_field(server: Server) -> None:
    _sign_in(server.client, tenant(server, "team"))
    csrf = _csrf(server.client)
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "x", "request": "A100 mem=24Gx", "command": "echo 'unclosed"},
        headers=HERE,
    )
    assert r.status_code == 422
    assert re.search(r'id="command-error"[^>]*>command: cannot split into arguments', r.text)
    r = server.client.post(
        "/submit",
        data={"csrf": csrf, "name": "x", "request": "A100 mem=24Gx", "command": "echo hi"},
        headers=HERE,
    )
    assert re.search(r'id="request-error"[^>]*>request.devices.memory: unknown memory unit', r.text)
    assert server.client.get("/v1/jobs", headers=server.admin).json() == []


@pytest.mark.slow
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


@pytest.mark.slow
def test_signing_in_again_replaces_the_session(server: Server) -> None:
    first = _sign_in(server.client, server.admin_token).split(";")[0]
    second = _sign_in(server.client, server.admin_token).split(";")[0]
    assert first != second
    server.client.cookies.clear()
    sid = first.split("=", 1)[1]
    r = server.client.get("/jobs", cookies={"xpupool_session": sid})
    assert (r.status_code, r.headers.get("location")) == (303, "/signin")


@pytest.mark.slow
def test_a_session_survives_a_restart_or_a_take_over_until_it_expires(server: Server) -> None:
    """Issue 50: sessions are kept in the store, so a plane opened on it after this one (a
    restart, or a standby that took over) knows the browser; the store holds only the id's
    hash, and the session's age still ends it there."""
    cookie = _sign_in(server.client, server.admin_token).split(";")[0]
    sid = cookie.split("=", 1)[1]
    csrf = _csrf(server.client)
    with server.plane.db.connect() as conn:
        stored = conn.execute(select(web_sessions)).all()
    assert len(stored) == 1 and sid not in str(stored[0]) and csrf not in str(stored[0])
    again = reopen(server)
    try:
        with again.client as c:
            c.follow_redirects = False
            c.cookies.set("xpupool_session", sid)
            assert c.get("/jobs").status_code == 200  # signed in on the new plane
            assert _csrf(c) == csrf  # its forms take the secret the page had before
            again.clock.advance(SESSION_TTL_S + 1)
            r = c.get("/jobs")
            assert (r.status_code, r.headers.get("location")) == (303, "/signin")
        with again.plane.db.connect() as conn:
            assert conn.execute(select(web_sessions)).all() == []  # the expired one dropped
    finally:
        again.plane.db.dispose()
