"""Every front that takes a policy name refuses an unknown one through one check
(``engine.profile.known_profile``): same wording, each front naming its own field."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from server_kit import FakeClock, Server, open_server, tenant

from xpupool.engine import BUILTIN_PROFILES
from xpupool.engine.profile import known_profile
from xpupool.engine.profile_file import parse_profiles
from xpupool.model.errors import RequestError
from xpupool.start_options import check_policies


def test_known_profile_returns_the_profile_or_names_the_field() -> None:
    assert known_profile(BUILTIN_PROFILES, "spread", "x") is BUILTIN_PROFILES["spread"]
    with pytest.raises(RequestError) as exc:
        known_profile(BUILTIN_PROFILES, "nope", "queue")
    assert exc.value.field == "queue" and exc.value.value == "nope"
    assert exc.value.reason.startswith("unknown policy; known: ")


def test_a_profile_file_names_the_base_it_cannot_find() -> None:
    data = {
        "apiVersion": "xpupool/v1",
        "kind": "SchedulerConfiguration",
        "profiles": [{"name": "p", "base": "x"}],
    }
    with pytest.raises(RequestError) as exc:
        parse_profiles(data)
    assert exc.value.field == "profiles[0].base"


def test_the_command_line_names_policy() -> None:
    check_policies(["spread"], {})
    with pytest.raises(click.BadParameter) as exc:
        check_policies(["spread", "nope"], {})
    assert exc.value.param_hint == "--policy" and "unknown policy" in exc.value.message
    assert "'nope'" in exc.value.message


def test_the_plane_names_policy(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as exc:
        open_server(tmp_path, FakeClock(), profile="nope")
    assert exc.value.field == "--policy"


def test_a_queue_names_profile(server: Server) -> None:
    tenant(server, "a")
    body = {"name": "q", "tenant": "a", "quotas": [], "profile": "nope"}
    r = server.client.put("/v1/queues/q", json=body, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "profile"
