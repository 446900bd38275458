"""How ``xpupool up`` and ``xpupool agent`` log: what an operator needs by default, the rest with
``-v``.

Quiet by default means no line per heartbeat (httpx logs every request at INFO: one line every
5 s for ever) and no line per device field a vendor tool does not report; ``-v`` gives both, and
the agent's and server's DEBUG lines (issue 42).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CHATTY = ("httpx", "httpcore", "httpx2")  # a line per request at INFO (httpx2: lightkube's)


def verbose_option(f: F) -> F:
    """``-v/--verbose``: every request and every unread device field, and DEBUG lines."""
    option = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Log every request the agent makes, every device field a vendor tool does not "
        "report, and debug lines (default: what an operator needs)",
    )
    return option(f)


def configure_logging(verbose: bool) -> None:
    """INFO for xpupool and WARNING for the HTTP client by default; DEBUG and INFO with
    ``verbose``."""
    logging.basicConfig(level=logging.INFO, format=FORMAT)
    logging.getLogger("xpupool").setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
