"""An unbound agent token bound to the node it first speaks for, as the plane's operation (issue
18): the token's row as the store has it now, the caller's rights on the node, what the call does
(a registration, a heartbeat) and the binding with its audit row, all under the plane's lock in
one step, so that two first uses of one token, or of two tokens for one node, cannot both bind.
``services/node_identity.py`` keeps the rights and the refusals, and calls :func:`first_use`;
nothing outside the package takes the lock (``lock.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import select, update

from xpupool.server.auth import Principal
from xpupool.server.storage.tenants import tokens as t_tokens

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = ["IN_PROCESS_TOKEN_ID", "first_use"]

IN_PROCESS_TOKEN_ID = 0
"""The token id of the agent inside ``xpupool up``: bound to the nodes it hosts, never stored."""

T = TypeVar("T")


def first_use(
    plane: ControlPlane,
    who: Principal,
    node: str,
    check: Callable[[Principal], bool],
    act: Callable[[Principal], T],
) -> T:
    """``act(who)`` for ``node``, with ``who`` read again from the store and its rights checked
    (``check(who)`` raises a refusal, or says whether this call binds an unbound token to
    ``node``) and the binding written, as one step under the plane's lock: what ``act`` returns.
    A refusal, from ``check`` or ``act``, binds nothing."""
    with plane.locked():
        who = _fresh(plane, who)
        bind = check(who)
        out = act(who)
        if bind:
            _bind(plane, who, node)
    return out


def _fresh(plane: ControlPlane, who: Principal) -> Principal:
    """``who`` as the store has it now: the cached principal of an unbound token may have been
    bound by a request that finished a moment ago."""
    if who.role != "agent" or who.nodes is not None or who.token_id == IN_PROCESS_TOKEN_ID:
        return who
    with plane.db.connect() as conn:
        node = conn.execute(select(t_tokens.c.node).where(t_tokens.c.id == who.token_id)).scalar()
    return (
        who
        if node is None
        else Principal(who.token_id, who.role, who.tenant, frozenset({node}), who.expires_at)
    )


def _bind(plane: ControlPlane, who: Principal, node: str) -> None:
    """Bind an unbound token to ``node`` (first use after the upgrade), with its audit row."""
    with plane.write() as conn:
        done = conn.execute(
            update(t_tokens)
            .where(t_tokens.c.id == who.token_id, t_tokens.c.node.is_(None))
            .values(node=node)
        ).rowcount
        if done:
            bound = Principal(who.token_id, who.role, who.tenant, frozenset({node}))
            plane.audit.record(
                bound, "bind_token", f"token {who.token_id}", 200, f"ok: bound to node {node}", conn
            )
        plane.forget_principals()
