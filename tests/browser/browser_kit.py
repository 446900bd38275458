"""Helpers of the browser tests (the fixtures are in conftest.py): the pool the tests sign in to,
signing in through the form, axe-core's verdict, DOM size, screenshots, and how a missing browser
is reported (a skip on a developer's machine, a failure in CI)."""

from __future__ import annotations

import os
import sys
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
