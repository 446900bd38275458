"""How an agent talks to the control plane: over HTTP (a standalone agent) or by direct calls.

One small protocol with two implementations, so the loop is the same code in ``xpupool agent`` and
inside ``xpupool up``. Every failure the loop can act on is one of two errors: :class:`NotFound`
(the server does not know the node or replica: register again, or drop the bytes) and
:class:`TransportError` (try again next period).
"""

from __future__ import annotations

from typing import Protocol

import httpx

from xpupool.model.errors import NotFound, XpupoolError
from xpupool.server.schemas import Heartbeat, HeartbeatReply, NodeIn


class TransportError(XpupoolError):
    """The server could not be reached or refused the request for a reason other than 404."""


class Transport(Protocol):
    def register(self, node: NodeIn) -> None: ...

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply: ...

    def append_log(self, node: str, job_id: int, replica: int, chunk: bytes) -> None: ...


class HttpTransport:
    """The agent protocol over HTTP with a bearer token (an agent or admin token)."""

    def __init__(self, server: str, token: str, timeout_s: float = 10.0) -> None:
        self.client = httpx.Client(
            base_url=server.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )

    def _post(self, path: str, **kwargs: object) -> httpx.Response:
        try:
            response = self.client.post(path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise TransportError(f"POST {path}: {exc}") from None
        if response.status_code == 404:
            raise NotFound("path", path)
        if response.status_code >= 400:
            raise TransportError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return response

    def register(self, node: NodeIn) -> None:
        self._post("/v1/agent/register", json=node.model_dump(mode="json"))

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        response = self._post("/v1/agent/heartbeat", json=body.model_dump(mode="json"))
        return HeartbeatReply.model_validate(response.json())

    def append_log(self, node: str, job_id: int, replica: int, chunk: bytes) -> None:
        self._post(
            f"/v1/agent/nodes/{node}/jobs/{job_id}/replicas/{replica}/logs",
            content=chunk,
            headers={"Content-Type": "application/octet-stream"},
        )

    def close(self) -> None:
        self.client.close()
