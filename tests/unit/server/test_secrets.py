"""Tenants' secrets (``/v1/secrets``): written once, never read back, sealed at rest, bound to
their tenant and name; a refused request changes nothing; a rotation of the key cut off at any
point loses nothing.

What must hold: no API answer, no error, no audit row and no file in the data dir carries a
secret's value in clear; a tenant reaches only its own secrets; a sealed value moved to another
row does not open.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from server_kit import BOTH_STORES, Server, reopen, tenant

from xpupool.model.errors import NotFound
from xpupool.server.plane import ControlPlane, secret_rows
from xpupool.server.secret_box import (
    SealBrokenError,
    Sealed,
    SecretBox,
    SecretKeyError,
    key_id,
    seal,
    unseal,
)
from xpupool.server.services.secrets import admin_secret

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

VALUE = "hf_Wq8zPl3secretVALUEdonotleak"


def put(srv: Server, token: str, name: str, body: dict[str, object], **params: str) -> object:
    return srv.client.put(f"/v1/secrets/{name}", json=body, headers=srv.as_(token), params=params)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            found.append(path)
    return found


def test_a_secret_is_set_listed_and_never_shown(server: Server) -> None:
    lab = tenant(server, "lab")
    r = put(server, lab, "hf-token", {"secret": VALUE})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "hf-token" and r.json()["size"] == len(VALUE)
    assert VALUE not in r.text
    again = put(server, lab, "hf-token", {"secret": VALUE + "2"})
    assert again.status_code == 200 and again.json()["size"] == len(VALUE) + 1
    listed = server.client.get("/v1/secrets", headers=server.as_(lab))
    assert [s["name"] for s in listed.json()] == ["hf-token"]
    assert VALUE not in listed.text
    assert "secret" not in listed.json()[0] and "sealed" not in listed.json()[0]


def test_the_value_is_in_no_file_answer_or_audit_row(server: Server) -> None:
    lab = tenant(server, "lab")
    assert put(server, lab, "hf-token", {"secret": VALUE}).status_code == 201
    # the admin sets one for the tenant (an audited write)
    r = put(server, server.admin_token, "registry", {"secret": VALUE}, tenant="lab")
    assert r.status_code == 201, r.text
    # refused ones: too long, both fields, not base64; none quotes the value
    for body in (
        {"secret": VALUE * 3000},
        {"secret": VALUE, "secret_base64": "AAAA"},
        {"secret_base64": VALUE + "!"},
    ):
        bad = put(server, server.admin_token, "other", body, tenant="lab")
        assert bad.status_code == 422, bad.text
        assert VALUE not in bad.text
    audit = server.client.get("/v1/audit", headers=server.admin)
    assert audit.status_code == 200 and "secret registry of tenant lab" in audit.text
    assert VALUE not in audit.text
    server.plane.db.dispose()  # the WAL into the database file, then look at every file
    assert files_holding(server.data, VALUE.encode()) == []


def test_binary_values_and_their_size(server: Server) -> None:
    lab = tenant(server, "lab")
    raw = bytes(range(256))
    r = put(server, lab, "keystore", {"secret_base64": base64.b64encode(raw).decode()})
    assert r.status_code == 201 and r.json()["size"] == 256
    with server.plane.db.connect() as conn:
        sealed = secret_rows.sealed(conn, "lab", ["keystore"])["keystore"]
    assert server.plane.secret_box.unseal("lab", "keystore", sealed) == raw


def test_a_tenant_reaches_only_its_own_secrets(server: Server) -> None:
    lab = tenant(server, "lab")
    other = tenant(server, "other")
    assert put(server, lab, "hf-token", {"secret": VALUE}).status_code == 201
    assert put(server, other, "hf-token", {"secret": "x"}, tenant="lab").status_code == 403
    got = server.client.get("/v1/secrets", headers=server.as_(other), params={"tenant": "lab"})
    assert got.status_code == 403
    gone = server.client.delete("/v1/secrets/hf-token", headers=server.as_(other))
    assert gone.status_code == 404  # its own namespace: no such secret
    assert server.client.get("/v1/secrets", headers=server.as_(other)).json() == []
    mine = server.client.get("/v1/secrets", headers=server.as_(lab)).json()
    assert [s["size"] for s in mine] == [len(VALUE)]  # untouched by the refusals
    admins_own = server.client.get("/v1/secrets", headers=server.admin)
    assert admins_own.status_code == 200 and admins_own.json() == []  # no tenant's
    missing = put(server, server.admin_token, "x", {"secret": "x"}, tenant="nobody")
    assert missing.status_code == 404


def test_the_admins_own_secrets_are_no_tenants(server: Server) -> None:
    """The admin naming no tenant sets its own secrets (a Kubernetes site's kubeconfig): no
    tenant lists, replaces or deletes them; they are sealed as no tenant's and go through a key
    rotation with the rest."""
    lab = tenant(server, "lab")
    assert put(server, server.admin_token, "site-kc", {"secret": VALUE}).status_code == 201
    assert put(server, lab, "site-kc", {"secret": "mine"}).status_code == 201  # lab's own
    assert server.client.delete("/v1/secrets/site-kc", headers=server.as_(lab)).status_code == 204
    assert server.client.get("/v1/secrets", headers=server.as_(lab)).json() == []
    listed = server.client.get("/v1/secrets", headers=server.admin).json()
    assert [(s["name"], s["size"]) for s in listed] == [("site-kc", len(VALUE))]
    assert admin_secret(server.plane, "site-kc") == VALUE.encode()
    with server.plane.db.connect() as conn:
        sealed = secret_rows.sealed(conn, None, ["site-kc"])["site-kc"]
    with pytest.raises(SealBrokenError):  # not a tenant's value, whatever the tenant
        server.plane.secret_box.unseal("lab", "site-kc", sealed)
    r = server.client.post("/v1/secrets/rotate-key", headers=server.admin)
    assert r.status_code == 200 and r.json()["resealed"] == 1, r.text
    assert admin_secret(server.plane, "site-kc") == VALUE.encode()
    audit = server.client.get("/v1/audit", headers=server.admin)
    assert "secret site-kc of the admin" in audit.text and VALUE not in audit.text
    assert server.client.delete("/v1/secrets/site-kc", headers=server.admin).status_code == 204
    with pytest.raises(NotFound):
        admin_secret(server.plane, "site-kc")


def test_bad_names_are_refused_naming_the_field(server: Server) -> None:
    lab = tenant(server, "lab")
    r = put(server, lab, "Bad_Name", {"secret": "x"})
    assert r.status_code == 422 and r.json()["field"] == "name"
    r = put(server, lab, "ok", {"value": "x"})
    assert r.status_code == 422 and r.json()["field"] == "value"  # unknown field
    assert server.client.get("/v1/secrets", headers=server.as_(lab)).json() == []


def test_delete(server: Server) -> None:
    lab = tenant(server, "lab")
    put(server, lab, "a", {"secret": "1"})
    assert server.client.delete("/v1/secrets/a", headers=server.as_(lab)).status_code == 204
    assert server.client.get("/v1/secrets", headers=server.as_(lab)).json() == []
    assert server.client.delete("/v1/secrets/a", headers=server.as_(lab)).status_code == 404


def test_a_sealed_value_moved_to_another_row_does_not_open(server: Server) -> None:
    a, b = tenant(server, "a"), tenant(server, "b")
    put(server, a, "token", {"secret": VALUE})
    put(server, b, "token", {"secret": "mine"})
    with server.plane.db.connect() as conn:
        stolen = secret_rows.sealed(conn, "a", ["token"])["token"]
    with pytest.raises(SealBrokenError):
        server.plane.secret_box.unseal("b", "token", stolen)
    with pytest.raises(SealBrokenError):
        server.plane.secret_box.unseal("a", "other", stolen)
    flipped = Sealed(stolen.key_id, stolen.data[:-1] + bytes([stolen.data[-1] ^ 1]))
    with pytest.raises(SealBrokenError):
        server.plane.secret_box.unseal("a", "token", flipped)


def test_the_key_file_is_private_and_checked(tmp_path: Path) -> None:
    box = SecretBox(tmp_path / "k" / "secret.key")
    box.key()
    assert stat.S_IMODE((tmp_path / "k" / "secret.key").stat().st_mode) == 0o600
    loose = tmp_path / "loose.key"
    loose.write_text(base64.b64encode(os.urandom(32)).decode())
    loose.chmod(0o644)
    with pytest.raises(SecretKeyError, match="other users may read"):
        SecretBox(loose).key()
    short = tmp_path / "short.key"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(SecretKeyError, match="not a secret key"):
        SecretBox(short).key()


def test_rotation_reseals_everything_and_survives_a_restart(server: Server) -> None:
    lab = tenant(server, "lab")
    for name in ("a", "b", "c"):
        put(server, lab, name, {"secret": f"{VALUE}-{name}"})
    old = key_id(server.plane.secret_box.key())
    r = server.client.post("/v1/secrets/rotate-key", headers=server.admin)
    assert r.status_code == 200, r.text
    assert r.json()["resealed"] == 3 and r.json()["key_id"] != old
    assert secret_rows.key_ids(server.plane) == {r.json()["key_id"]}
    tenant_try = server.client.post("/v1/secrets/rotate-key", headers=server.as_(lab))
    assert tenant_try.status_code == 403
    srv = reopen(server)
    with srv.plane.db.connect() as conn:
        sealed = secret_rows.sealed(conn, "lab", ["a", "b", "c"])
    opened = {n: srv.plane.secret_box.unseal("lab", n, s) for n, s in sealed.items()}
    assert opened == {n: f"{VALUE}-{n}".encode() for n in "abc"}


def test_a_rotation_cut_off_before_its_commit_keeps_the_old_key(server: Server) -> None:
    lab = tenant(server, "lab")
    put(server, lab, "a", {"secret": VALUE})
    box = server.plane.secret_box
    old = box.key()

    def crash(_: object) -> int:
        raise OSError("killed before the commit")

    with pytest.raises(OSError, match="killed before the commit"):
        box.rotate(crash)
    assert not box.pending.exists() and box.key() == old
    # the process died with the new key on disk and the transaction never committed
    box.pending.write_text(base64.b64encode(os.urandom(32)).decode())
    box.pending.chmod(0o600)
    srv = reopen(server)
    assert not srv.plane.secret_box.pending.exists()
    assert srv.plane.secret_box.key() == old


def test_a_rotation_cut_off_after_its_commit_finishes_at_the_next_start(server: Server) -> None:
    lab = tenant(server, "lab")
    put(server, lab, "a", {"secret": VALUE})
    box = server.plane.secret_box
    new = os.urandom(32)
    old = box.key()
    # what the commit left: rows under the new key, the new key still beside the old one
    secret_rows.reseal_all(
        server.plane, lambda t, n, s: seal(new, t, n, unseal({key_id(old): old}, t, n, s))
    )
    box.pending.write_text(base64.b64encode(new).decode())
    box.pending.chmod(0o600)
    srv = reopen(server)
    assert not srv.plane.secret_box.pending.exists()
    assert srv.plane.secret_box.key() == new
    with srv.plane.db.connect() as conn:
        sealed = secret_rows.sealed(conn, "lab", ["a"])["a"]
    assert srv.plane.secret_box.unseal("lab", "a", sealed) == VALUE.encode()


def test_a_plane_whose_key_cannot_open_the_stored_secrets_says_so(
    server: Server, tmp_path: Path
) -> None:
    """Issue 50: a standby on another host has its own data dir, so by default its own key; a
    take-over by it would leave every stored secret sealed. It serves, and /healthz names both
    keys and the option; given the key that sealed them, nothing is said."""
    lab = tenant(server, "lab")
    assert put(server, lab, "hf-token", {"secret": VALUE}).status_code == 201
    sealed_under = key_id(server.plane.secret_box.key())
    elsewhere = tmp_path / "standby"
    elsewhere.mkdir()
    other = ControlPlane(server.db_url, elsewhere, clock=server.clock)
    try:
        (note,) = other.health.notes
        assert sealed_under in note and "--secret-key-file" in note
        assert other.health.failure is None  # it serves
    finally:
        other.db.dispose()
    shared = ControlPlane(
        server.db_url, elsewhere, clock=server.clock, secret_key_file=server.data / "secret.key"
    )
    try:
        assert shared.health.notes == []
    finally:
        shared.db.dispose()
