"""The node lifecycle: a node's states, and the one function that moves a node.

A node is ready or lost (its agent went silent), and independently cordoned (nothing new is
placed there), draining (a registration changed its inventory under live allocations: those
devices wait for them to end) and deleting (the admin asked to delete it once nothing is held
there; cordoned meanwhile). Every path that changes a node (a registration, a heartbeat, the
lost-node watch, a cordon, the end of a drain, a deletion) describes what happened as an event and
asks :func:`transition` what follows. The function is pure, as ``server/job_lifecycle.py`` is for
jobs: it sees the node's :class:`NodeLife` and the event, and returns an :class:`NodeOutcome`
(the life that follows, or that the node is removed; whether the engine may place there; whether
capacity may have grown) or refuses the move with :class:`IllegalNodeTransition`. The plane's
node methods (``ControlPlane.node_event`` and the registrations) are its only callers that store:
they write the outcome's columns (:func:`row_values`) and then change the record and the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from xpupool.model.errors import Conflict


class NodeState(StrEnum):
    """The states a node can be in; a node is ``READY`` or ``LOST``, and any of the others."""

    READY = "ready"
    LOST = "lost"
    CORDONED = "cordoned"
    DRAINING = "draining"
    DELETING = "deleting"


@dataclass(frozen=True, slots=True)
class NodeLife:
    """What the transition needs to know of a node. ``deleting_since``: Unix time the admin
    asked to delete it (None: not being deleted); a node being deleted is cordoned."""

    lost: bool = False
    cordoned: bool = False
    draining: bool = False
    deleting_since: float | None = None

    @property
    def states(self) -> frozenset[NodeState]:
        """Its states: ``READY`` or ``LOST``, with whichever of the others hold."""
        found = {NodeState.LOST if self.lost else NodeState.READY}
        if self.cordoned:
            found.add(NodeState.CORDONED)
        if self.draining:
            found.add(NodeState.DRAINING)
        if self.deleting_since is not None:
            found.add(NodeState.DELETING)
        return frozenset(found)

    @property
    def schedulable(self) -> bool:
        """The engine may place new work there: heard from, and not cordoned."""
        return not self.lost and not self.cordoned


class IllegalNodeTransition(Conflict):
    """``event`` cannot happen to a node in ``life`` (409); nothing was changed."""

    def __init__(self, life: NodeLife | None, event: NodeEvent) -> None:
        self.life, self.event = life, event
        if life is None:
            where = "a node not registered"
        else:
            where = "a " + " and ".join(sorted(s.value for s in life.states)) + " node"
        super().__init__(f"{type(event).__name__.lower()} is not possible for {where}")


# ---------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Register:
    """A node registers (new, or again): ready. A new node is cordoned when ``cordoned`` (a
    cluster-file node declared unschedulable); one known keeps its cordon and the admin's
    deletion. ``draining``: the new inventory waits for live allocations (``server/drain.py``)."""

    cordoned: bool = False
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Heard:
    """A heartbeat arrived: a lost node is ready again."""


@dataclass(frozen=True, slots=True)
class Silent:
    """Its agent has not been heard from for longer than the plane allows: ready -> lost."""


@dataclass(frozen=True, slots=True)
class Cordon:
    """The admin (or the plane, setting aside what it could not read) cordons it."""


@dataclass(frozen=True, slots=True)
class Uncordon:
    """The admin uncordons it; a deletion waiting for it to drain is cancelled."""


@dataclass(frozen=True, slots=True)
class DrainStep:
    """Allocations on a draining node ended and part of its new inventory is served now;
    ``done``: nothing waits any more."""

    done: bool


@dataclass(frozen=True, slots=True)
class Delete:
    """The admin deletes it at ``at`` (Unix time): removed now when nothing is ``held`` there,
    else cordoned and marked, to be removed when it is (:class:`Emptied`). Asked again while it
    waits: as it was."""

    at: float
    held: bool


@dataclass(frozen=True, slots=True)
class Emptied:
    """The last allocation on a node being deleted ended: removed."""


NodeEvent = Register | Heard | Silent | Cordon | Uncordon | DrainStep | Delete | Emptied


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """What follows an event. ``life`` None: the node is removed (its row, its record and its
    credentials go). ``bump``: capacity may have grown (pending jobs are worth trying again; a
    drain step or a removal rebuilds the engine, and the release that caused it bumps).
    ``cancelled_deletion``: an uncordon cancelled the admin's deletion."""

    life: NodeLife | None
    bump: bool = False
    cancelled_deletion: bool = False

    @property
    def removed(self) -> bool:
        return self.life is None


# ---------------------------------------------------------------------------------- the function
def transition(life: NodeLife | None, event: NodeEvent) -> NodeOutcome:
    """What ``event`` does to a node in ``life`` (None: a node not registered). Raises
    :class:`IllegalNodeTransition` for a move the lifecycle does not have: anything but a
    registration for a node not registered, a lost node going silent, a drain step of a node
    not draining, the emptying of a node not being deleted."""
    if life is None:
        if isinstance(event, Register):
            return NodeOutcome(NodeLife(cordoned=event.cordoned, draining=event.draining))
        raise IllegalNodeTransition(None, event)
    if isinstance(event, Register):
        after = replace(life, lost=False, draining=event.draining)
        return NodeOutcome(after, bump=life.lost and after.schedulable)
    if isinstance(event, Heard):
        after = replace(life, lost=False)
        return NodeOutcome(after, bump=life.lost and after.schedulable)
    if isinstance(event, Silent) and not life.lost:
        return NodeOutcome(replace(life, lost=True))
    if isinstance(event, Cordon):
        return NodeOutcome(replace(life, cordoned=True))
    if isinstance(event, Uncordon):
        after = replace(life, cordoned=False, deleting_since=None)
        return NodeOutcome(after, bump=True, cancelled_deletion=life.deleting_since is not None)
    if isinstance(event, DrainStep) and life.draining:
        return NodeOutcome(replace(life, draining=not event.done))
    if isinstance(event, Delete):
        if not event.held:
            return NodeOutcome(None)
        since = life.deleting_since if life.deleting_since is not None else event.at
        return NodeOutcome(replace(life, cordoned=True, deleting_since=since))
    if isinstance(event, Emptied) and life.deleting_since is not None:
        return NodeOutcome(None)
    raise IllegalNodeTransition(life, event)


def row_values(life: NodeLife) -> dict[str, object]:
    """The lifecycle's columns of a node row (``storage/fleet.py``): ``schedulable`` is the
    cordon as stored (whether the admin lets work be placed there), ``status`` its liveness. The
    drain is stored with the inventory it waits to serve (``drain_to``), not here."""
    return {
        "status": NodeState.LOST.value if life.lost else NodeState.READY.value,
        "schedulable": not life.cordoned,
        "deleting_since": life.deleting_since,
    }
