"""Helpers of the browser tests (the fixtures are in conftest.py): the pool the tests sign in to,
signing in through the form, axe-core's verdict, DOM size, screenshots, and how a missing browser
is reported (a skip on a developer's machine, a failure in CI)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from server_proc import ServerProc

DOMAIN_LABEL = "rack"
"""The node label the pool's sites file names as the agent pool's link domain; only the third
site's agent carries it (conftest.py), so only its node is in a named domain."""


def _required() -> bool:
    return os.environ.get("CI") in ("1", "true") or os.environ.get("XPUPOOL_REQUIRE_BROWSER") == "1"


def unavailable(reason: str) -> None:
    """Fail (CI) or skip (a developer's machine) with ``reason`` printed."""
    print(f"browser tests: {reason}", file=sys.stderr)
    if _required():
        pytest.fail(f"browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def find_chromium() -> str:
    """The Chromium to drive: ``$XPUPOOL_CHROMIUM``, else ``chromium`` on PATH (else
    :func:`unavailable`)."""
    given = os.environ.get("XPUPOOL_CHROMIUM")
    found = shutil.which(given) if given else shutil.which("chromium")
    if not found:
        unavailable(
            f"no browser at XPUPOOL_CHROMIUM={given!r}"
            if given
            else "no 'chromium' on PATH: install it with 'apt-get install -y chromium'"
        )
    assert found is not None
    return found


_RUNNING: list[Any] = []
"""The Playwright a :func:`chromium` holds open, while one does: Playwright's sync API runs one
event loop per thread, so a second ``sync_playwright()`` while the browser tests' session
fixture holds the first fails ("using Playwright Sync API inside the asyncio loop"); a nested
:func:`chromium` launches its browser from the running one instead."""


@contextmanager
def chromium(path: str | None = None) -> Iterator[Any]:
    """Chromium (``path``, default :func:`find_chromium`'s) launched by Playwright, closed on
    exit; the browser tests' session fixture, and tests elsewhere that look at the dashboard
    of a pool of their own (the Kubernetes federation's), in the same pytest run or not."""
    path = path or find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the 'playwright' package is not installed (pip install -e '.[dev]')")
    # --no-sandbox: Chromium's own sandbox cannot start as root (CI containers run as root)
    args = ["--no-sandbox"]
    if _RUNNING:
        b = _RUNNING[-1].chromium.launch(executable_path=path, args=args)
        try:
            yield b
        finally:
            b.close()
        return
    with sync_playwright() as pw:
        _RUNNING.append(pw)
        try:
            b = pw.chromium.launch(executable_path=path, args=args)
            try:
                yield b
            finally:
                b.close()
        finally:
            _RUNNING.pop()


@dataclass
class Pool:
    """The server, its clients and the tokens the tests sign in with."""

    srv: ServerProc
    admin: httpx.Client
    tokens: dict[str, str]  # "admin", "team", "other" -> token

    @property
    def url(self) -> str:
        return self.srv.url

    def api(self, who: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[who]}"}
        )


def sign_in(browser: Any, url: str, token: str) -> Any:
    """A fresh browser context signed in through the form; returns its page on the overview."""
    context = browser.new_context(base_url=url, viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.goto("/signin")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    return page


def axe_violations(page: Any, axe_source: str) -> list[dict[str, Any]]:
    """Serious and critical axe-core violations on the page as it is now."""
    page.evaluate(f"() => {{ {axe_source}\n }}")
    result = page.evaluate("async () => (await window.axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"][:3]]}
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


def shot(page: Any, name: str, dark: bool = False) -> None:
    """With ``XPUPOOL_SCREENSHOTS=DIR``: save the viewport as DIR/NAME.png (the README's
    pictures: ``XPUPOOL_SCREENSHOTS=docs/img pytest tests/browser``); otherwise nothing."""
    folder = os.environ.get("XPUPOOL_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    if dark:
        page.emulate_media(color_scheme="dark")
    path = Path(folder) / f"{name}.png"
    page.screenshot(path=str(path))
    from PIL import Image  # matplotlib's dependency: 256 colours keep a UI picture, at a third

    with Image.open(path) as shot_rgb:
        small = shot_rgb.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    if dark:
        page.emulate_media(color_scheme="light")


def dom_nodes(page: Any) -> int:
    return int(page.evaluate("() => document.getElementsByTagName('*').length"))
