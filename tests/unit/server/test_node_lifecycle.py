"""The node lifecycle's transition table (server/plane/node_lifecycle.py): every move of every
state, allowed or refused, and the source check that only the plane package changes a node."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from xpupool.model.errors import Conflict
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane.node_lifecycle import NodeLife, NodeState

AT = 7.0  # when a deletion is asked in the table
READY = NodeLife()
LOST = NodeLife(lost=True)
CORDONED = NodeLife(cordoned=True)
DRAINING = NodeLife(draining=True)
DELETING = NodeLife(cordoned=True, deleting_since=5.0)
LIVES: dict[str, NodeLife | None] = {
    "new": None,
    "ready": READY,
    "lost": LOST,
    "cordoned": CORDONED,
    "draining": DRAINING,
    "deleting": DELETING,
}
EVENTS: dict[str, nl.NodeEvent] = {
    "register": nl.Register(),
    "register-drain": nl.Register(draining=True),
    "heard": nl.Heard(),
    "silent": nl.Silent(),
    "cordon": nl.Cordon(),
    "uncordon": nl.Uncordon(),
    "drained": nl.DrainStep(done=True),
    "drain-step": nl.DrainStep(done=False),
    "delete-held": nl.Delete(at=AT, held=True),
    "delete-free": nl.Delete(at=AT, held=False),
    "emptied": nl.Emptied(),
}
REMOVED = "removed"
REFUSED = "refused"
Expected = NodeLife | str | tuple[NodeLife, str]  # a life, or with "bump" / "cancels"

# every (state, event): the life that follows (with "bump" when capacity may have grown),
# REMOVED, or REFUSED
TABLE: dict[tuple[str, str], Expected] = {
    ("new", "register"): READY,
    ("new", "register-drain"): DRAINING,
    **{("new", e): REFUSED for e in EVENTS if not e.startswith("register")},
    ("ready", "register"): READY,
    ("ready", "register-drain"): DRAINING,
    ("ready", "heard"): READY,
    ("ready", "silent"): LOST,
    ("ready", "cordon"): CORDONED,
    ("ready", "uncordon"): (READY, "bump"),
    ("ready", "drained"): REFUSED,
    ("ready", "drain-step"): REFUSED,
    ("ready", "delete-held"): NodeLife(cordoned=True, deleting_since=AT),
    ("ready", "delete-free"): REMOVED,
    ("ready", "emptied"): REFUSED,
    ("lost", "register"): (READY, "bump"),
    ("lost", "register-drain"): (DRAINING, "bump"),
    ("lost", "heard"): (READY, "bump"),
    ("lost", "silent"): REFUSED,
    ("lost", "cordon"): NodeLife(lost=True, cordoned=True),
    ("lost", "uncordon"): (LOST, "bump"),
    ("lost", "drained"): REFUSED,
    ("lost", "drain-step"): REFUSED,
    ("lost", "delete-held"): NodeLife(lost=True, cordoned=True, deleting_since=AT),
    ("lost", "delete-free"): REMOVED,
    ("lost", "emptied"): REFUSED,
    ("cordoned", "register"): CORDONED,
    ("cordoned", "register-drain"): NodeLife(cordoned=True, draining=True),
    ("cordoned", "heard"): CORDONED,
    ("cordoned", "silent"): NodeLife(lost=True, cordoned=True),
    ("cordoned", "cordon"): CORDONED,
    ("cordoned", "uncordon"): (READY, "bump"),
    ("cordoned", "drained"): REFUSED,
    ("cordoned", "drain-step"): REFUSED,
    ("cordoned", "delete-held"): NodeLife(cordoned=True, deleting_since=AT),
    ("cordoned", "delete-free"): REMOVED,
    ("cordoned", "emptied"): REFUSED,
    ("draining", "register"): READY,
    ("draining", "register-drain"): DRAINING,
    ("draining", "heard"): DRAINING,
    ("draining", "silent"): NodeLife(lost=True, draining=True),
    ("draining", "cordon"): NodeLife(cordoned=True, draining=True),
    ("draining", "uncordon"): (DRAINING, "bump"),
    ("draining", "drained"): READY,
    ("draining", "drain-step"): DRAINING,
    ("draining", "delete-held"): NodeLife(cordoned=True, draining=True, deleting_since=AT),
    ("draining", "delete-free"): REMOVED,
    ("draining", "emptied"): REFUSED,
    ("deleting", "register"): DELETING,
    ("deleting", "register-drain"): replace(DELETING, draining=True),
    ("deleting", "heard"): DELETING,
    ("deleting", "silent"): replace(DELETING, lost=True),
    ("deleting", "cordon"): DELETING,
    ("deleting", "uncordon"): (READY, "cancels"),
    ("deleting", "drained"): REFUSED,
    ("deleting", "drain-step"): REFUSED,
    ("deleting", "delete-held"): DELETING,  # asked again: as it was, since the first time
    ("deleting", "delete-free"): REMOVED,
    ("deleting", "emptied"): REMOVED,
}


def test_the_table_states_every_state_and_event() -> None:
    assert set(TABLE) == {(s, e) for s in LIVES for e in EVENTS}


@pytest.mark.parametrize(("state", "event"), sorted(TABLE))
def test_each_move(state: str, event: str) -> None:
    life, ev, expected = LIVES[state], EVENTS[event], TABLE[state, event]
    if expected == REFUSED:
        with pytest.raises(nl.IllegalNodeTransition) as refused:
            nl.transition(life, ev)
        assert isinstance(refused.value, Conflict)  # 409
        return
    out = nl.transition(life, ev)
    if expected == REMOVED:
        assert out.removed and out.life is None
        return
    after, note = expected if isinstance(expected, tuple) else (expected, "")
    assert out.life == after
    assert out.bump is (note in ("bump", "cancels"))
    assert out.cancelled_deletion is (note == "cancels")


def test_states_and_schedulable() -> None:
    assert READY.states == {NodeState.READY} and READY.schedulable
    assert LOST.states == {NodeState.LOST} and not LOST.schedulable
    assert DELETING.states == {NodeState.READY, NodeState.CORDONED, NodeState.DELETING}
    assert not DELETING.schedulable
    assert DRAINING.schedulable  # its draining devices are cordoned, not the node
    assert nl.row_values(NodeLife(lost=True, cordoned=True, deleting_since=3.0)) == {
        "status": "lost",
        "schedulable": False,
        "deleting_since": 3.0,
    }


def test_a_refusal_names_the_move_and_the_states() -> None:
    with pytest.raises(nl.IllegalNodeTransition, match="silent is not possible for a lost node"):
        nl.transition(LOST, nl.Silent())
    with pytest.raises(nl.IllegalNodeTransition, match="not registered"):
        nl.transition(None, nl.Cordon())


SERVER = Path(__file__).resolve().parents[3] / "src" / "xpupool" / "server"


def test_only_the_plane_changes_a_node() -> None:
    """No module outside ``server/plane/`` writes a node row (it does not import the table) or
    sets a record's state: every change goes through the plane's node methods."""
    offenders = []
    for path in sorted(SERVER.rglob("*.py")):
        rel = path.relative_to(SERVER).as_posix()
        if rel.startswith("plane/"):
            continue
        text = path.read_text()
        if re.search(r"storage\.fleet import|storage import fleet", text):
            offenders.append(f"{rel}: imports the node table")
        if re.search(r"\brec\w*\.(status|cordoned|deleting_since|target)\s*=[^=]", text):
            offenders.append(f"{rel}: sets a node record's state")
    assert offenders == []
