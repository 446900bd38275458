"""Where the client finds its URL and token: flags, then environment, then the config file, then
the local admin token of `xpupool up`. The resolver takes env, home and cwd as arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.client import DEFAULT_URL, resolve_config
from xpupool.model.errors import RequestError


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / ".config" / "xpupool").mkdir(parents=True)
    return tmp_path / "home"


def _write_config(home: Path, text: str) -> Path:
    path = home / ".config" / "xpupool" / "config.yaml"
    path.write_text(text)
    return path


def test_nothing_configured_is_the_default_url_and_no_token(home: Path, tmp_path: Path) -> None:
    cfg = resolve_config(None, None, {}, home, tmp_path)
    assert (cfg.url, cfg.token, cfg.token_source) == (DEFAULT_URL, None, "none")


def test_flags_beat_env_beat_file(home: Path, tmp_path: Path) -> None:
    _write_config(home, "url: http://file:1\ntoken: file-token\n")
    env = {"XPUPOOL_URL": "http://env:2/", "XPUPOOL_TOKEN": "env-token"}
    assert resolve_config(None, None, {}, home, tmp_path).token == "file-token"
    assert resolve_config(None, None, {}, home, tmp_path).url == "http://file:1"
    from_env = resolve_config(None, None, env, home, tmp_path)
    assert (from_env.url, from_env.token, from_env.token_source) == (
        "http://env:2",
        "env-token",
        "XPUPOOL_TOKEN",
    )
    flags = resolve_config("https://flag:3", "flag-token", env, home, tmp_path)
    assert (flags.url, flags.token, flags.token_source) == (
        "https://flag:3",
        "flag-token",
        "--token",
    )


def test_url_and_token_resolve_separately(home: Path, tmp_path: Path) -> None:
    _write_config(home, "token: file-token\n")
    cfg = resolve_config("http://flag:3", None, {}, home, tmp_path)
    assert (cfg.url, cfg.token) == ("http://flag:3", "file-token")


def test_xpupool_config_names_the_file_and_token_file_is_relative_to_it(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret").write_text("from-file\n")
    path = tmp_path / "other.yaml"
    path.write_text("url: http://other:9\ntoken_file: secret\n")
    cfg = resolve_config(None, None, {"XPUPOOL_CONFIG": str(path)}, home, tmp_path)
    assert (cfg.url, cfg.token, cfg.token_source) == (
        "http://other:9",
        "from-file",
        str(tmp_path / "secret"),
    )


def test_a_missing_explicit_config_is_an_error(home: Path, tmp_path: Path) -> None:
    with pytest.raises(RequestError) as err:
        resolve_config(None, None, {"XPUPOOL_CONFIG": str(tmp_path / "nope")}, home, tmp_path)
    assert err.value.field == "XPUPOOL_CONFIG"


def test_an_unknown_config_key_is_named(home: Path, tmp_path: Path) -> None:
    _write_config(home, "url: http://x:1\ntokn: oops\n")
    with pytest.raises(RequestError) as err:
        resolve_config(None, None, {}, home, tmp_path)
    assert err.value.field.endswith("tokn")


def test_a_url_without_scheme_is_refused(home: Path, tmp_path: Path) -> None:
    with pytest.raises(RequestError) as err:
        resolve_config("127.0.0.1:8080", None, {}, home, tmp_path)
    assert err.value.field == "url"


def test_local_admin_token_only_for_a_local_url_and_only_as_a_last_resort(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / ".xpupool").mkdir()
    (tmp_path / ".xpupool" / "admin-token").write_text("admin-secret\n")
    local = resolve_config(None, None, {}, home, tmp_path)
    assert (local.token, local.token_source) == ("admin-secret", ".xpupool/admin-token")
    assert resolve_config("http://localhost:9", None, {}, home, tmp_path).token == "admin-secret"
    assert resolve_config("https://pool.example.com", None, {}, home, tmp_path).token is None
    assert resolve_config(None, None, {"XPUPOOL_TOKEN": "t"}, home, tmp_path).token == "t"


@pytest.mark.parametrize("given", ["http://h:8080/v1", "http://h:8080/v1/", "http://h:8080/"])
def test_the_url_xpupool_up_prints_works_with_or_without_v1(
    given: str, home: Path, tmp_path: Path
) -> None:
    assert resolve_config(given, None, {}, home, tmp_path).url == "http://h:8080"
