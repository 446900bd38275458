"""The dashboard in a real browser: Playwright driving Debian's ``chromium`` against a real
``xpupool up`` on 127.0.0.1 (the mixed two-site cluster file, its in-process agent running the
jobs) plus a third site's standalone agent, as an operator would run them.

A missing Chromium, Playwright or axe-core is a skip with the reason printed on a developer's
machine, and a FAILURE where the browser tests must run: with ``CI=1`` or
``XPUPOOL_REQUIRE_BROWSER=1`` (``.ci/run`` sets it after installing the ``chromium`` package).
axe-core comes from the npm registry at test time into ``~/.cache/xpupool/npm`` (never into
the repository) and is injected into pages through the DevTools protocol, which the pages'
Content-Security-Policy does not govern, so the CSP under test stays on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_kit import DOMAIN_LABEL, Pool, chromium, find_chromium, unavailable
from server_proc import CLUSTER_MIXED, ServerProc, stop_process, until

FAKE_A100 = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
AXE_PREFIX = Path.home() / ".cache" / "xpupool" / "npm"
AXE_JS = AXE_PREFIX / "node_modules" / "axe-core" / "axe.min.js"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
THIRD_SITE = "guangzhou"
THIRD_NODE = "gz-a100"
THIRD_DOMAIN = "row-1"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    return find_chromium()


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core 4 from the npm registry, cached outside the repository."""
    if not AXE_JS.exists():
        npm = shutil.which("npm")
        if npm is None:
            unavailable("no 'npm' to install axe-core with (apt-get install -y npm)")
        assert npm is not None
        done = subprocess.run(
            [
                npm,
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(AXE_PREFIX),
                "axe-core@4",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not AXE_JS.exists():
            unavailable(f"npm install axe-core@4 failed: {done.stderr[-500:]}")
    return AXE_JS.read_text()


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    with chromium(chromium_path) as b:
        yield b


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """``xpupool up`` on the mixed cluster file with its agent, tenants 'team' and 'other', and a
    standalone agent registering a node of a third site, in link domain ``THIRD_DOMAIN`` of the
    sites file's ``agents.link_domain_label``."""
    data = tmp_path_factory.mktemp("up")
    sites_file = data / "sites.yaml"
    sites_file.write_text(f"sites: []\nagents: {{link_domain_label: {DOMAIN_LABEL}}}\n")
    srv = ServerProc(
        data,
        cluster=CLUSTER_MIXED,
        agent=True,
        extra_args=(
            *("--heartbeat", "0.5", "--lost-after", "10", "--history-interval", "1s"),
            *("--usage-interval", "2s"),  # the usage page's energy within seconds
            *("--sites", str(sites_file)),
        ),
    )
    srv.start()
    agent: subprocess.Popen[bytes] | None = None
    admin = httpx.Client(base_url=srv.url, headers=srv.headers())
    try:
        tokens = {"admin": srv.admin_token}
        for tenant in ("team", "other"):
            admin.post("/v1/tenants", json={"name": tenant}).raise_for_status()
            r = admin.post(f"/v1/tenants/{tenant}/tokens", json={"role": "tenant"})
            r.raise_for_status()
            tokens[tenant] = r.json()["token"]
        r = admin.post("/v1/tokens", json={"role": "agent", "node": THIRD_NODE})
        r.raise_for_status()
        agent_log = data / "agent.log"
        agent = subprocess.Popen(
            [
                *CLI,
                "agent",
                "--server",
                srv.url,
                "--node",
                THIRD_NODE,
                "--site",
                THIRD_SITE,
                "--label",
                f"{DOMAIN_LABEL}={THIRD_DOMAIN}",
                "--fake",
                str(FAKE_A100),
                "--poll",
                "0.1",
                "--work-dir",
                str(data / "gz-agent"),
            ],
            stdout=agent_log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": r.json()["token"]},
        )
        until(
            lambda: any(s["name"] == THIRD_SITE for s in admin.get("/v1/sites").json()),
            f"the {THIRD_SITE} agent's registration (log: {agent_log})",
        )
        yield Pool(srv, admin, tokens)
    finally:
        if agent is not None:
            stop_process(agent)
        admin.close()
        srv.stop()
