"""The node token a bootstrap token is exchanged for, kept in the agent's work dir."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from xpupool.agent.node_token import NodeTokenFile, is_bootstrap


def test_a_bootstrap_token_is_used_until_a_node_token_is_stored(tmp_path: Path) -> None:
    store = NodeTokenFile(tmp_path / "work" / "node-token")
    token, why = store.choose("xpb_boot")
    assert token == "xpb_boot" and why is not None and "stored in" in why
    store.save("xpp_node")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    token, why = store.choose("xpb_boot")  # restarted with the same, spent, bootstrap token
    assert token == "xpp_node" and why is not None


def test_a_token_that_is_not_a_bootstrap_token_is_used_as_given(tmp_path: Path) -> None:
    store = NodeTokenFile(tmp_path / "node-token")
    store.save("xpp_old")
    assert store.choose("xpp_new") == ("xpp_new", None)
    assert is_bootstrap("xpb_x") and not is_bootstrap("xpp_x")


def test_a_store_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = NodeTokenFile(blocker / "node-token")  # its folder is a file
    store.save("xpp_node")
    assert "cannot store the node token" in caplog.text
    assert store.load() is None
