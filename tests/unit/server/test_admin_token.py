"""The admin token file and its rotation (server/admin_token.py over the plane's tenant store):
a rotation revokes every earlier admin token, and the file holds the one that works."""

from __future__ import annotations

from pathlib import Path

from server_kit import FakeClock, open_server

from xpupool.server import admin_token
from xpupool.server.services import tenants


def test_the_first_start_writes_the_token_and_a_rotation_replaces_it(tmp_path: Path) -> None:
    plane, _ = open_server(tmp_path, FakeClock())  # the store's admin token, not written out
    try:
        assert admin_token.ensure(plane, tmp_path) is not None  # a token, but no file for it
        admin_token.rotate(plane, tmp_path)
        first = admin_token.admin_token_path(tmp_path).read_text().strip()
        assert tenants.authenticate(plane, first) is not None
        admin_token.rotate(plane, tmp_path)
        second = admin_token.admin_token_path(tmp_path).read_text().strip()
        assert second != first
        assert tenants.authenticate(plane, first) is None  # revoked, and not served from a cache
        who = tenants.authenticate(plane, second)
        assert who is not None and who.is_admin
        assert admin_token.ensure(plane, tmp_path) is None  # one exists, and its file
    finally:
        plane.db.dispose()
