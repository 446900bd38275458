"""Where the CLI finds the server and its token: flags, then environment, then a config file.

Precedence (first that is set wins), separately for the URL and the token:
``--url``/``--token`` flags; ``XPUPOOL_URL``/``XPUPOOL_TOKEN``; the config file
(``$XPUPOOL_CONFIG``, else ``~/.config/xpupool/config.yaml``) with ``url`` and ``token`` or
``token_file``; then the default URL ``http://127.0.0.1:8080``. When no token is configured and
the URL names this host, ``./.xpupool/admin-token`` (what ``xpupool up`` writes) is used if it
exists, so a local ``xpupool up`` works with no setup. An HTTPS server is verified against
``XPUPOOL_CA`` or the config file's ``ca`` when set, else the system's trust store. The
resolver is pure over its inputs (environment mapping, home and working directory) so tests need
no monkeypatching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from xpupool.model.errors import RequestError

DEFAULT_URL = "http://127.0.0.1:8080"
LOCAL_ADMIN_TOKEN = Path(".xpupool") / "admin-token"
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


@dataclass(frozen=True, slots=True)
class ClientConfig:
    url: str
    token: str | None
    token_source: str = "none"
    """Where the token came from ('--token', 'XPUPOOL_TOKEN', a file path, 'none'): shown when
    the server refuses it, so the user knows which setting to fix."""
    ca: str | None = None
    """PEM file of the CA that signed the server's certificate (``XPUPOOL_CA`` or ``ca`` in the
    config file); None: the system's trust store."""


def config_path(env: Mapping[str, str], home: Path) -> Path:
    """``$XPUPOOL_CONFIG`` if set, else ``~/.config/xpupool/config.yaml``."""
    explicit = env.get("XPUPOOL_CONFIG")
    return Path(explicit) if explicit else home / ".config" / "xpupool" / "config.yaml"


def _read_file_config(path: Path, required: bool) -> dict[str, str]:
    """The ``{url, token, token_file}`` keys of the config file; {} when it does not exist
    (an explicit ``$XPUPOOL_CONFIG`` that does not exist is an error)."""
    if not path.exists():
        if required:
            raise RequestError("XPUPOOL_CONFIG", str(path), "no such file")
        return {}
    import yaml  # only when there is a file: most commands run without one

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RequestError(str(path), None, f"cannot read config: {exc}") from None
    if not isinstance(data, dict):
        raise RequestError(str(path), None, "must be a mapping with url, token or token_file")
    unknown = sorted(set(data) - {"url", "token", "token_file", "ca"})
    if unknown:
        raise RequestError(f"{path}: {unknown[0]}", data[unknown[0]], "unknown key")
    return {k: str(v) for k, v in data.items() if v is not None}


def _read_token(path: Path, field: str) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise RequestError(field, str(path), f"cannot read token file: {exc.strerror}") from None
    if not token:
        raise RequestError(field, str(path), "token file is empty")
    return token


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in _LOCAL_HOSTS


API_PREFIX = "/v1"


def resolve_config(
    url: str | None,
    token: str | None,
    env: Mapping[str, str],
    home: Path,
    cwd: Path,
) -> ClientConfig:
    """The URL and token to use; raises ``RequestError`` naming the setting that is unusable."""
    path = config_path(env, home)
    file_cfg = _read_file_config(path, required="XPUPOOL_CONFIG" in env)
    resolved_url = url or env.get("XPUPOOL_URL") or file_cfg.get("url") or DEFAULT_URL
    if urlsplit(resolved_url).scheme not in ("http", "https"):
        raise RequestError("url", resolved_url, "must start with http:// or https://")
    resolved_url = resolved_url.rstrip("/")
    if resolved_url.endswith(API_PREFIX):  # the URL `xpupool up` prints is the API's: ends in /v1
        resolved_url = resolved_url[: -len(API_PREFIX)]
    ca = _ca(env, file_cfg, path)
    if token:
        return ClientConfig(resolved_url, token, "--token", ca)
    if env.get("XPUPOOL_TOKEN"):
        return ClientConfig(resolved_url, env["XPUPOOL_TOKEN"], "XPUPOOL_TOKEN", ca)
    if file_cfg.get("token"):
        return ClientConfig(resolved_url, file_cfg["token"], str(path), ca)
    if file_cfg.get("token_file"):
        token_path = Path(file_cfg["token_file"]).expanduser()
        if not token_path.is_absolute():
            token_path = path.parent / token_path
        return ClientConfig(
            resolved_url, _read_token(token_path, f"{path}: token_file"), str(token_path), ca
        )
    local = cwd / LOCAL_ADMIN_TOKEN
    if is_local(resolved_url) and local.exists():
        found = _read_token(local, "admin-token")
        return ClientConfig(resolved_url, found, str(LOCAL_ADMIN_TOKEN), ca)
    return ClientConfig(resolved_url, None, ca=ca)


def _ca(env: Mapping[str, str], file_cfg: dict[str, str], path: Path) -> str | None:
    """``XPUPOOL_CA``, else the config file's ``ca`` (relative: beside the file); it must exist."""
    if env.get("XPUPOOL_CA"):
        found, field = Path(env["XPUPOOL_CA"]).expanduser(), "XPUPOOL_CA"
    elif file_cfg.get("ca"):
        found, field = Path(file_cfg["ca"]).expanduser(), f"{path}: ca"
        if not found.is_absolute():
            found = path.parent / found
    else:
        return None
    if not found.is_file():
        raise RequestError(field, str(found), "no such CA file")
    return str(found)
