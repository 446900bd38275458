"""How an agent talks to the control plane: over HTTP (a standalone agent) or by direct calls.

One small protocol with two implementations, so the loop is the same code in ``xpupool agent`` and
inside ``xpupool up``. Every failure the loop can act on is one of four errors: :class:`NotFound`
(the server does not know the node or replica: register again, or drop the bytes),
:class:`TransportError` (try again next period), :class:`AgentRefused` (trying again cannot
help: the credential is refused, the protocol versions differ, or the server's TLS certificate is
not trusted; the agent stops and says why) and :class:`NodeReleased` (one hosted node is no longer
this agent's: the agent lets go of it and goes on with the others).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from xpupool.model.errors import NotFound, XpupoolError
from xpupool.server.schemas import agent_protocol
from xpupool.server.schemas.agent_protocol import Heartbeat, HeartbeatReply, NodeIn, Registered

if TYPE_CHECKING:
    # imported by HttpTransport, which only a standalone agent makes: the in-process agent of
    # ``xpupool up`` calls the plane directly, and importing httpx cost its start a fifth of a
    # CPU second (docs/benchmarks.md, start-up)
    import httpx

FATAL_STATUS = frozenset({401, 403, 426})


class TransportError(XpupoolError):
    """The server could not be reached or refused the request for a reason other than 404."""


class AgentRefused(XpupoolError):  # noqa: N818 - an answer, not a bug: the agent must stop
    """The server refuses this agent in a way retrying cannot change: a revoked, expired or spent
    token (401), a credential bound to another node (403), another agent protocol (426), or a
    server certificate this agent cannot verify."""


class NodeReleased(XpupoolError):  # noqa: N818 - an answer, not a bug: the node is not ours
    """The server no longer lets this agent speak for one of its nodes (the admin deleted it or
    took it over), while the agent's other nodes stay its own. Only the in-process agent hosts
    several nodes without a token per node, so only its transport raises it; a standalone
    agent's revoked token is :class:`AgentRefused`."""

    def __init__(self, node: str, reason: str) -> None:
        self.node = node
        super().__init__(reason)


class Transport(Protocol):
    def register(self, node: NodeIn) -> None: ...

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply: ...

    def append_log(
        self, node: str, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        """``chunk`` of run ``attempt``'s output, starting at byte ``offset`` of it."""
        ...


class IdleHeartbeats(Protocol):
    """One heartbeat for many idle nodes (the in-process agent's simulated nodes): what a
    heartbeat with no metrics and no replica reports would say, for all of them in one call.
    Returns the names among ``nodes`` that need a heartbeat of their own: the server holds work
    for them, or has something to say to them alone (unknown, refused)."""

    def heartbeat_idle(self, nodes: list[str]) -> set[str]: ...


def _untrusted_certificate(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure at the root of ``exc``, if that is what it is."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class HttpTransport:
    """The agent protocol over HTTP(S) with a bearer token (an agent, bootstrap or admin token).

    ``servers``: one control plane URL, or several: an active plane and its standbys on one
    store (docs/postgresql.md). Each call goes to the one that answered last; a connection that
    fails, or a 503 (what a standby answers to everything, and a plane that lost its store), is
    tried on the next one, each once, so an agent follows a take-over without a restart. Every
    agent call may be sent twice: a registration and a heartbeat say the whole state, a log
    chunk carries its offset. ``ca``: a PEM file of the CA that signed the servers' certificates
    (``--ca``); None = the system's trust store. ``on_token``: called with the node's own token
    when a registration with a bootstrap token returns one, before the transport switches to it
    (the agent stores it; the planes share the store that knows it)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        token: str,
        timeout_s: float = 10.0,
        *,
        ca: str | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> None:
        import httpx

        verify: ssl.SSLContext | bool = True
        if ca is not None:
            verify = ssl.create_default_context(cafile=ca)
        self.on_token = on_token
        listed = [servers] if isinstance(servers, str) else list(servers)
        self.servers = [s.rstrip("/") for s in listed]
        if not self.servers:
            raise ValueError("no server URL")
        self.current = 0  # the server that answered last
        self.client = httpx.Client(
            headers={
                "Authorization": f"Bearer {token}",
                agent_protocol.AGENT_PROTOCOL_HEADER: str(agent_protocol.AGENT_PROTOCOL),
            },
            timeout=timeout_s,
            verify=verify,
        )

    @property
    def server(self) -> str:
        """The server calls go to now."""
        return self.servers[self.current]

    def _post(self, path: str, **kwargs: object) -> httpx.Response:
        failed: list[str] = []
        for _ in self.servers:
            try:
                response = self._post_once(path, **kwargs)
            except TransportError as exc:
                failed.append(str(exc))
            else:
                if response.status_code != 503 or len(self.servers) == 1:
                    return self._checked(path, response)
                failed.append(f"{self.server}: 503 {_reason(response)}")
            self.current = (self.current + 1) % len(self.servers)
        if len(self.servers) == 1:
            raise TransportError(failed[0])
        raise TransportError(f"POST {path}: no server answered: " + "; ".join(failed))

    def _post_once(self, path: str, **kwargs: object) -> httpx.Response:
        import httpx  # loaded by __init__: a dictionary look-up

        try:
            return self.client.post(self.server + path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            untrusted = _untrusted_certificate(exc)
            if untrusted is not None:
                raise AgentRefused(
                    f"TLS: the server's certificate is not trusted ({untrusted.verify_message}); "
                    "give --ca FILE with the CA that signed it"
                ) from None
            raise TransportError(f"POST {path}: {exc}") from None

    def _checked(self, path: str, response: httpx.Response) -> httpx.Response:
        if response.status_code == 404:
            raise NotFound("path", path)
        if response.status_code in FATAL_STATUS:
            raise AgentRefused(f"POST {path}: {response.status_code} {_reason(response)}")
        if response.status_code >= 400:
            raise TransportError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return response

    def register(self, node: NodeIn) -> None:
        response = self._post("/v1/agent/register", json=node.model_dump(mode="json"))
        issued = Registered.model_validate(response.json()).token
        if issued:
            if self.on_token is not None:
                self.on_token(issued)
            self.client.headers["Authorization"] = f"Bearer {issued}"

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        response = self._post("/v1/agent/heartbeat", json=body.model_dump(mode="json"))
        return HeartbeatReply.model_validate(response.json())

    def append_log(
        self, node: str, job_id: int, replica: int, chunk: bytes, offset: int, attempt: int
    ) -> None:
        self._post(
            f"/v1/agent/nodes/{node}/jobs/{job_id}/replicas/{replica}/logs"
            f"?offset={offset}&attempt={attempt}",
            content=chunk,
            headers={"Content-Type": "application/octet-stream"},
        )

    def close(self) -> None:
        self.client.close()


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return str(body.get("reason", body)) if isinstance(body, dict) else str(body)[:500]
