"""``import xpupool.cli`` must not pull in the server stack (STYLE.md section 4): a laptop CLI
needs httpx and pydantic, not FastAPI or SQLAlchemy. A fresh interpreter, so that modules other
tests imported do not hide a regression."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@pytest.mark.slow
def test_importing_the_cli_pulls_in_neither_fastapi_nor_sqlalchemy() -> None:
    code = (
        "import sys, xpupool.cli, xpupool.client; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'sqlalchemy')); "
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# What a client command must not import: the server's stack, the engine's numerics, and the wire
# types' pydantic (client/_views.py reads the fleet's answers instead). httpx too: client/_wire.py
# sends with the standard library. Modules, never timings: docs/benchmarks/startup-42.md has those.
HEAVY = ("pydantic", "fastapi", "sqlalchemy", "numba", "numpy", "scipy", "httpx", "uvicorn")
NODE = {
    "name": "gpu-0", "site": "bj", "status": "ready", "schedulable": True, "source": "cluster",
    "cpu_milli": 64000, "memory_mib": 1 << 20, "cpu_allocated_milli": 0,
    "memory_allocated_mib": 0, "labels": {}, "arch": "x86_64", "os": "linux", "devices": 8,
    "devices_free": 8, "last_heartbeat": None, "runtime": None, "taints": [], "deleting": False,
}  # fmt: skip


@pytest.fixture
def pool_url() -> Iterator[str]:
    """A stand-in server that answers ``GET /v1/nodes`` with one node, so that the command runs
    to its table and every module it needs on the way is imported."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps([NODE] if self.path.startswith("/v1/nodes") else []).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["nodes", "devices", "sites", "queues", "jobs"])
def test_a_fleet_command_imports_only_what_it_needs(pool_url: str, command: str) -> None:
    code = (
        "import sys\n"
        "from xpupool.cli import main\n"
        f"main([{command!r}, '--url', {pool_url!r}, '--token', 't'], standalone_mode=False)\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if command == "nodes":
        assert "gpu-0" in done.stdout
    assert "HEAVY []" in done.stdout, done.stdout.splitlines()[-1]


@pytest.mark.slow
def test_help_still_lists_every_command_with_its_help() -> None:
    """Lazy commands (cli.py LAZY_COMMANDS) are listed by ``--help`` with their first line."""
    from click.testing import CliRunner

    from xpupool.cli import LAZY_COMMANDS, main

    out = CliRunner().invoke(main, ["--help"]).output
    for name in LAZY_COMMANDS:
        assert re.search(rf"^  {name} +\S", out, re.M), f"{name} missing from --help:\n{out}"
    assert re.search(r"^  nodes +List nodes", out, re.M)
    assert re.search(r"^  up +Start the control plane", out, re.M)
