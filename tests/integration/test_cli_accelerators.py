"""``xpupool accelerators`` against a real server (the example pool) and without one."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_cli_client import Plane, srv

from xpupool.cli import main

__all__ = ["srv"]  # the module's server fixture, shared with test_cli_client


def test_lists_models_with_pool_counts(srv: Plane) -> None:
    rows = srv.json("accelerators", "--in-pool")
    assert rows and all(r["in_pool"] > 0 for r in rows)
    assert {r["family"] for r in rows} >= {"A100", "910B", "L20"}
    table = srv.ok("accelerators", "--vendor", "ascend").stdout
    assert "910B3" in table and "pool" in table and "A100" not in table


def test_catalog_only_needs_no_server() -> None:
    env = {"XPUPOOL_URL": "http://127.0.0.1:9", "XPUPOOL_TOKEN": "nope", "XPUPOOL_CONFIG": None}
    result = CliRunner().invoke(
        main,
        ["accelerators", "--catalog-only", "-o", "json"],
        env=env,  # type: ignore[arg-type]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert any(r["model"] == "MI300X" for r in rows)
    assert all(r["in_pool"] is None for r in rows)


def test_without_a_server_it_points_at_catalog_only() -> None:
    env = {"XPUPOOL_URL": "http://127.0.0.1:9", "XPUPOOL_TOKEN": "nope", "XPUPOOL_CONFIG": None}
    result = CliRunner().invoke(main, ["accelerators"], env=env)  # type: ignore[arg-type]
    assert result.exit_code != 0
    assert "cannot reach xpupool" in result.output and "--catalog-only" in result.output
