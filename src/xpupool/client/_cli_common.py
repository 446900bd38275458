"""What every client command shares: ``--url``/``--token``, ``-o table|json``, building the client
and printing either a rich table or the server's JSON."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from xpupool.client._config import resolve_config
from xpupool.client._http import Client
from xpupool.model.errors import RequestError

if TYPE_CHECKING:  # rich and pydantic are imported when a command prints or parses input
    from pydantic import ValidationError
    from rich.console import Console, RenderableType

F = TypeVar("F", bound=Callable[..., Any])

CONNECTION_HELP = (
    "Server URL and token come from --url/--token, else XPUPOOL_URL/XPUPOOL_TOKEN, else the "
    "config file ($XPUPOOL_CONFIG or ~/.config/xpupool/config.yaml: url, token or token_file); "
    "the URL defaults to http://127.0.0.1:8080. With no token configured and a local URL, "
    "./.xpupool/admin-token (written by `xpupool up`) is used if it exists. An https:// server is "
    "verified against XPUPOOL_CA (or `ca` in the config file), else the system's CAs."
)


def connection_options(func: F) -> F:
    """Adds ``--url`` and ``--token``; the command receives a ready ``client: Client``."""
    func = click.option(
        "--token", envvar=None, help="Bearer token [env XPUPOOL_TOKEN, config file]"
    )(func)
    func = click.option("--url", help="Server URL [env XPUPOOL_URL, config file]")(func)
    return func


def output_option(func: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for scripts (the API's own fields)",
    )(func)


def make_client(url: str | None, token: str | None) -> Client:
    cfg = resolve_config(url, token, os.environ, Path.home(), Path.cwd())
    return Client(cfg)


def console_width() -> int:
    """``COLUMNS`` if set, else the terminal's width, else 80 (piped, or unknown): what tables
    are fitted to. Rich alone would take the width of any terminal among stdin, stdout and
    stderr, so ``xpupool jobs > file`` came out at the width of the window it was typed in."""
    return shutil.get_terminal_size((80, 24)).columns


def console() -> Console:
    """On a terminal rich follows its width as it changes (``top`` redraws for a resized window);
    piped or redirected, ``console_width()``."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else console_width())


def _plain(item: Any) -> Any:
    """A record as JSON data: a ``_views`` record is the server's own object (``raw``), a wire
    model its dump."""
    if hasattr(item, "raw"):
        return item.raw
    if hasattr(item, "model_dump"):
        return item.model_dump(mode="json")
    return item


def to_json(data: Any) -> str:
    """A record, a list of records or a dict as indented JSON (``-o json``)."""
    if isinstance(data, dict):
        return json.dumps(data, indent=2, default=str)
    if isinstance(data, Sequence) and not isinstance(data, str):
        return json.dumps([_plain(m) for m in data], indent=2)
    return json.dumps(_plain(data), indent=2)


def emit(
    output: str,
    data: Any,
    render: Callable[[], RenderableType],
) -> None:
    """Print ``data`` as JSON or as what ``render`` builds."""
    if output == "json":
        click.echo(to_json(data))
    else:
        console().print(render())


def request_error(exc: ValidationError, where: str = "") -> RequestError:
    """The first pydantic error as one ``RequestError`` with a dotted path (``quotas[0].nominal``)."""
    from xpupool.model.validation import error_path, error_value

    first = exc.errors()[0]
    path = error_path(first)
    field = f"{where}: {path}" if where and path else (where or path or "input")
    return RequestError(field, error_value(first), first.get("msg", "invalid"))


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise RequestError(path, None, f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RequestError(path, None, f"not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise RequestError(path, type(data).__name__, "must be a mapping")
    return data
