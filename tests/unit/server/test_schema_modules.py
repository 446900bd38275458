"""The wire types' package keeps the agent protocol apart (issue 44): importing it loads the
base and the node types it carries, never the API's tenants, queues, jobs or overview; the agent
imports no other module of the package; and the replica states it shares with the server read
and write the same words they did as plain strings."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import xpupool.agent
from xpupool.server.schemas.agent_protocol import (
    FINAL_REPLICA_STATES,
    Heartbeat,
    ReplicaReport,
    ReplicaState,
)

PROTOCOL = "xpupool.server.schemas.agent_protocol"


def test_importing_the_agent_protocol_loads_only_what_it_carries() -> None:
    code = (
        f"import json, sys, {PROTOCOL}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('xpupool.server.schemas'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert loaded == [
        "xpupool.server.schemas",
        PROTOCOL,
        "xpupool.server.schemas.base",
        "xpupool.server.schemas.nodes",
    ]


def _schema_imports(path: Path) -> set[str]:
    """The ``xpupool.server.schemas`` modules ``path`` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "xpupool.server.schemas":
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif node.module.startswith("xpupool.server.schemas"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("xpupool.server.schemas"))
    return found


def test_the_agent_imports_only_the_agent_protocol() -> None:
    agent = Path(xpupool.agent.__file__).parent
    wrong = {
        str(path.relative_to(agent)): sorted(other)
        for path in sorted(agent.rglob("*.py"))
        if (other := _schema_imports(path) - {PROTOCOL})
    }
    assert not wrong, wrong


def test_replica_states_are_the_words_on_the_wire() -> None:
    assert [s.value for s in ReplicaState] == ["running", "succeeded", "failed", "stopped"]
    assert frozenset(ReplicaState) - FINAL_REPLICA_STATES == {ReplicaState.RUNNING}
    report = ReplicaReport.model_validate({"job_id": 1, "replica": 0, "state": "stopped"})
    assert report.state is ReplicaState.STOPPED
    assert report.model_dump(mode="json")["state"] == "stopped"
    schema = ReplicaReport.model_json_schema()["properties"]["state"]
    assert schema == {
        "enum": ["running", "succeeded", "failed", "stopped"],
        "title": "State",
        "type": "string",
    }


def test_an_unknown_replica_state_is_refused_naming_the_words() -> None:
    with pytest.raises(ValidationError) as caught:
        Heartbeat.model_validate(
            {"node": "n1", "replicas": [{"job_id": 1, "replica": 0, "state": "starting"}]}
        )
    error = caught.value.errors()[0]
    assert error["loc"] == ("replicas", 0, "state")
    assert error["msg"] == "Input should be 'running', 'succeeded', 'failed' or 'stopped'"


def _server_imports(path: Path) -> set[str]:
    """The ``xpupool.server`` modules ``path`` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "xpupool.server" or node.module.startswith("xpupool.server."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("xpupool.server"))
    return found


def test_the_agent_imports_nothing_of_the_server_but_the_protocol() -> None:
    """The agent sits beside the server, not above it (issue 44, part 6): the agent inside
    ``xpupool up`` lives on the server side (``server/inprocess_agent.py``)."""
    agent = Path(xpupool.agent.__file__).parent
    wrong = {
        str(path.relative_to(agent)): sorted(other)
        for path in sorted(agent.rglob("*.py"))
        if (other := _server_imports(path) - {PROTOCOL, "xpupool.server.schemas"})
    }
    assert not wrong, wrong
