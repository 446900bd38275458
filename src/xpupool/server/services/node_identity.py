"""Which node an agent credential speaks for, checked on every agent call (issue 18).

A token issued with ``--node NAME`` speaks for NAME only. A token bound to no node (one issued
before node binding existed, or without ``--node``) is bound to the first node it registers or
heartbeats as, if no other credential holds that node and it is not a cluster-file node; from
then on it is a bound token. A bootstrap token registers one new node: the same transaction
stores the node, spends the bootstrap token and issues the node's own token, which the reply
carries once (kubelet's TLS bootstrap, with a bearer token in place of a certificate). Only the
admin re-registers a cluster-file node: that takes it over (it becomes an agent node, and the
in-process agent, like the agent of a node the admin deletes, speaks for it no more). The HTTP
routes and the in-process agent call the same functions here, so the same checks hold for both;
every refusal is a :class:`Forbidden` naming the node the credential is bound to, and changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy import Connection, insert, select, update

from xpupool.model.errors import Forbidden
from xpupool.server.auth import Principal, new_token, token_hash
from xpupool.server.plane import ControlPlane, token_binding
from xpupool.server.plane.token_binding import IN_PROCESS_TOKEN_ID as IN_PROCESS_TOKEN_ID
from xpupool.server.schemas.agent_protocol import Heartbeat, HeartbeatReply, NodeIn, Registered
from xpupool.server.schemas.nodes import Node as NodeView
from xpupool.server.services import agents, fleet
from xpupool.server.storage.tenants import tokens as t_tokens

log = logging.getLogger("xpupool.server")


def in_process_principal(nodes: Iterable[str]) -> Principal:
    """The agent inside ``xpupool up``: an agent for the nodes it hosts and no other."""
    return Principal(IN_PROCESS_TOKEN_ID, "agent", None, frozenset(nodes))


def _cluster_refusal(node: str) -> Forbidden:
    return Forbidden(f"node {node!r} comes from the cluster file: only the admin may take it over")


def _check(plane: ControlPlane, who: Principal, node: str, action: str) -> bool:
    """Raise :class:`Forbidden` unless ``who`` may ``action`` for ``node``; True when ``who`` is
    an unbound agent token that this call will bind to ``node``."""
    if who.is_admin:
        return False
    if who.token_id == IN_PROCESS_TOKEN_ID and plane.is_released(node):
        raise Forbidden(
            f"node {node!r} was deleted or taken over by the admin: this server's in-process "
            "agent speaks for it no more"
        )
    if who.role == "bootstrap":
        raise Forbidden(
            f"a bootstrap token only registers a new node; to {action} node {node!r} use the "
            "node's own token from the registration reply"
        )
    if who.role != "agent":
        raise Forbidden("an agent or admin credential is required")
    if who.nodes is not None:
        if node not in who.nodes:
            raise Forbidden(
                f"this credential speaks for node {who.node!r} only; it may not {action} "
                f"node {node!r}"
            )
        return False
    if action not in ("register", "heartbeat"):
        raise Forbidden(
            f"this credential is bound to no node yet; it may not {action} node {node!r} "
            "before it registers or heartbeats as its own node"
        )
    rec = plane.node(node)
    if rec is not None and rec.source == "cluster":
        raise _cluster_refusal(node)
    with plane.db.connect() as conn:
        holder = conn.execute(
            select(t_tokens.c.id).where(
                t_tokens.c.node == node,
                t_tokens.c.role == "agent",
                t_tokens.c.revoked.is_(False),
            )
        ).first()
    if holder is not None:
        raise Forbidden(
            f"node {node!r} already has its own credential; this unbound credential may not "
            f"{action} it (the admin issues tokens for it: token issue --agent --node {node})"
        )
    return True


def register(plane: ControlPlane, who: Principal, body: NodeIn) -> Registered:
    """Register ``body`` as ``who``: a bootstrap token is exchanged for the node's own token."""
    if who.role == "bootstrap":
        return _exchange(plane, who, body)

    def check(who: Principal) -> bool:
        return _check(plane, who, body.name, "register")

    def act(who: Principal) -> NodeView:
        rec = plane.node(body.name)
        cluster = rec is not None and rec.source == "cluster"
        if cluster and not who.is_admin:
            raise _cluster_refusal(body.name)
        node = fleet.register(plane, body)  # an agent node from now on
        if cluster:  # the admin took it over: the in-process agent lets go of it
            plane.release_node(body.name)
            log.warning("node %s taken over from the cluster file by the admin", body.name)
        return node

    node = token_binding.first_use(plane, who, body.name, check, act)
    return Registered.model_validate(node.model_dump())


def _may_exchange(plane: ControlPlane, conn: Connection, who: Principal, name: str) -> None:
    """Raise :class:`Forbidden` unless the bootstrap token ``who`` may register node ``name``:
    live, not pinned to another name, and the name new to the pool."""
    row = conn.execute(select(t_tokens).where(t_tokens.c.id == who.token_id)).first()
    if row is None or row.revoked:
        raise Forbidden("this bootstrap token is spent or revoked")
    if row.node is not None and row.node != name:
        raise Forbidden(f"this bootstrap token registers node {row.node!r} only, not {name!r}")
    if name in plane.node_records:
        raise Forbidden(
            f"node {name!r} is already registered: a bootstrap token registers a new node only "
            f"(the admin issues a token for it: token issue --agent --node {name})"
        )


def _exchange(plane: ControlPlane, who: Principal, body: NodeIn) -> Registered:
    secret = new_token()

    def may_exchange() -> None:
        with plane.db.connect() as conn:
            _may_exchange(plane, conn, who, body.name)

    plane.read(may_exchange)  # refuse early: before the inventory checks

    def spend(conn: Connection) -> None:
        _may_exchange(plane, conn, who, body.name)  # again, in the registration's transaction
        conn.execute(
            update(t_tokens)
            .where(t_tokens.c.id == who.token_id)
            .values(revoked=True, node=body.name)
        )
        issued = conn.execute(
            insert(t_tokens).values(
                tenant=None,
                role="agent",
                name=f"node {body.name} (bootstrap token {who.token_id})",
                hash=token_hash(secret),
                created_at=plane.clock(),
                revoked=False,
                node=body.name,
                expires_at=None,
            )
        )
        new_id = int(issued.inserted_primary_key[0])  # type: ignore[index]
        plane.audit.record(
            who,
            "bootstrap_exchange",
            f"node {body.name}",
            200,
            f"ok: bootstrap token {who.token_id} spent, token {new_id} issued for node {body.name}",
            conn,
        )

    node = fleet.register(plane, body, within=spend)
    plane.forget_principals()
    return Registered.model_validate({**node.model_dump(), "token": secret})


def heartbeat(plane: ControlPlane, who: Principal, body: Heartbeat) -> HeartbeatReply:
    if who.role == "agent" and who.nodes is None and who.token_id != IN_PROCESS_TOKEN_ID:
        # first use of an unbound token: check, heartbeat and bind as one
        reply = token_binding.first_use(
            plane,
            who,
            body.node,
            lambda who: _check(plane, who, body.node, "heartbeat"),
            lambda who: agents.heartbeat(plane, body, who),
        )
    else:
        _check(plane, who, body.node, "heartbeat")
        reply = agents.heartbeat(plane, body, who)
    plane.audit.count_heartbeat(body.node)
    return reply


def heartbeat_idle(plane: ControlPlane, who: Principal, nodes: list[str]) -> set[str]:
    """One heartbeat for idle ``nodes`` of a credential bound to them (the in-process agent's
    simulated nodes): see :func:`agents.heartbeat_idle`. A node ``who`` may not heartbeat for is
    left out and returned, so that its own heartbeat raises the refusal for it alone."""
    if who.nodes is None:  # an unbound token binds on its own heartbeat, one node at a time
        return set(nodes)
    refused = set(nodes) - who.nodes
    if who.token_id == IN_PROCESS_TOKEN_ID:
        refused |= plane.released_among(nodes)
    mine = [n for n in nodes if n not in refused] if refused else nodes
    return agents.heartbeat_idle(plane, mine) | refused


def append_log(
    plane: ControlPlane,
    who: Principal,
    node: str,
    job_id: int,
    replica: int,
    chunk: bytes,
    offset: int | None = None,
    attempt: int | None = None,
) -> None:
    _check(plane, who, node, "upload logs for")
    agents.append_log(plane, node, job_id, replica, chunk, offset, attempt)
