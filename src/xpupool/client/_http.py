"""The typed HTTP client of the control plane: one method per endpoint, answers parsed with the
server's own wire types (``server/schemas/``, read leniently), failures mapped to ``ApiError`` or
``Unreachable`` as httpx maps transport errors (``httpx/_exceptions.py``)."""

from __future__ import annotations

import ssl
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from xpupool.client._config import ClientConfig
from xpupool.client._errors import ApiError, Unreachable
from xpupool.server.schemas.audit import AuditEntry
from xpupool.server.schemas.base import ErrorBody
from xpupool.server.schemas.devices import Accelerator, Device
from xpupool.server.schemas.jobs import Job, JobIn
from xpupool.server.schemas.models import CatalogModel, ModelIntent, PlanRow
from xpupool.server.schemas.nodes import Node, NodeDeletion, NodeTaintsIn, Site
from xpupool.server.schemas.queues import Queue, QueueIn
from xpupool.server.schemas.tenants import Tenant, TenantIn, TenantPatch, Token, TokenIn

M = TypeVar("M", bound=BaseModel)


class Client:
    """A session with one server. ``transport`` lets tests drive an app in-process."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        verify: ssl.SSLContext | bool = True
        if config.ca is not None:
            verify = ssl.create_default_context(cafile=config.ca)
        self._http = httpx.Client(
            base_url=config.url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------- plumbing
    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            detail = str(exc) or type(exc).__name__
            if "CERTIFICATE_VERIFY_FAILED" in detail:
                detail += " (set XPUPOOL_CA to the CA file that signed the server's certificate)"
            raise Unreachable(self.config.url, detail) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _error(self, response: httpx.Response) -> ApiError:
        status = response.status_code
        try:
            body = ErrorBody.model_validate(response.json())
        except (ValueError, ValidationError):
            text = response.text.strip().splitlines()
            reason = text[0][:200] if text else response.reason_phrase
            return ApiError(status, None, None, f"server answered {status}: {reason}")
        reason = body.reason
        if status == 401:
            reason = f"{reason} (token from {self.config.token_source})"
            if self.config.token is None:
                reason = "no token: give --token, set XPUPOOL_TOKEN or a config file"
        if status == 404:  # the reason already names it: "job '5' not found"
            return ApiError(status, None, body.value, reason)
        return ApiError(status, body.field, body.value, reason)

    def _get(self, path: str, model: type[M], **params: Any) -> M:
        query = {k: v for k, v in params.items() if v is not None}
        return model.model_validate(self._call("GET", path, params=query).json())

    def _list(self, path: str, model: type[M], **params: Any) -> list[M]:
        query = {k: v for k, v in params.items() if v is not None}
        return TypeAdapter(list[model]).validate_python(  # type: ignore[valid-type]
            self._call("GET", path, params=query).json()
        )

    def _post(self, path: str, model: type[M], body: BaseModel | None = None) -> M:
        payload = body.model_dump(mode="json", exclude_unset=True) if body is not None else None
        return model.model_validate(self._call("POST", path, json=payload).json())

    # ---------------------------------------------------------------------------- jobs
    def submit(self, job: JobIn) -> Job:
        return self._post("/v1/jobs", Job, job)

    def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        return self._list("/v1/jobs", Job, state=state, queue=queue, tenant=tenant, limit=limit)

    def job(self, job_id: int) -> Job:
        return self._get(f"/v1/jobs/{job_id}", Job)

    def cancel(self, job_id: int) -> Job:
        return self._post(f"/v1/jobs/{job_id}/cancel", Job)

    def logs(self, job_id: int, *, replica: int = 0, offset: int = 0) -> bytes:
        """Raw log bytes of one replica from byte ``offset``; the next offset is ``offset + len``."""
        params = {"replica": replica, "offset": offset}
        return self._call("GET", f"/v1/jobs/{job_id}/logs", params=params).content

    # ---------------------------------------------------------------------------- fleet
    def nodes(self, *, site: str | None = None) -> list[Node]:
        return self._list("/v1/nodes", Node, site=site)

    def node(self, name: str) -> Node:
        return self._get(f"/v1/nodes/{name}", Node)

    def cordon_node(self, name: str, cordon: bool = True) -> Node:
        return self._post(f"/v1/nodes/{name}/{'cordon' if cordon else 'uncordon'}", Node)

    def taint_node(self, name: str, change: NodeTaintsIn) -> Node:
        return self._post(f"/v1/nodes/{quote(name, safe='')}/taints", Node, change)

    def delete_node(self, name: str, *, drain: bool = False) -> NodeDeletion:
        response = self._call(
            "DELETE", f"/v1/nodes/{quote(name, safe='')}", params={"drain": str(drain).lower()}
        )
        return NodeDeletion.model_validate(response.json())

    def devices(self, *, node: str | None = None) -> list[Device]:
        return self._list("/v1/devices", Device, node=node)

    def cordon_device(self, uuid: str, cordon: bool = True) -> Device:
        return self._post(
            f"/v1/devices/{quote(uuid, safe='')}/{'cordon' if cordon else 'uncordon'}", Device
        )

    def sites(self) -> list[Site]:
        return self._list("/v1/sites", Site)

    def accelerators(self) -> list[Accelerator]:
        return self._list("/v1/accelerators", Accelerator)

    def models(self) -> list[CatalogModel]:
        return self._list("/v1/models", CatalogModel)

    def plan(self, body: ModelIntent) -> list[PlanRow]:
        payload = body.model_dump(mode="json", exclude_unset=True)
        return TypeAdapter(list[PlanRow]).validate_python(
            self._call("POST", "/v1/plan", json=payload).json()
        )

    # ---------------------------------------------------------------------------- tenants
    def create_tenant(self, body: TenantIn) -> Tenant:
        return self._post("/v1/tenants", Tenant, body)

    def tenants(self) -> list[Tenant]:
        return self._list("/v1/tenants", Tenant)

    def update_tenant(self, name: str, patch: TenantPatch) -> Tenant:
        payload = patch.model_dump(mode="json", exclude_unset=True)
        return Tenant.model_validate(
            self._call("PATCH", f"/v1/tenants/{quote(name)}", json=payload).json()
        )

    def issue_token(self, tenant: str, body: TokenIn) -> Token:
        return self._post(f"/v1/tenants/{tenant}/tokens", Token, body)

    def issue_agent_token(self, body: TokenIn) -> Token:
        return self._post("/v1/tokens", Token, body)

    def audit(
        self, *, since: float | None = None, limit: int | None = None, kind: str | None = None
    ) -> list[AuditEntry]:
        return self._list("/v1/audit", AuditEntry, since=since, limit=limit, kind=kind)

    def tokens(self) -> list[Token]:
        return self._list("/v1/tokens", Token)

    def revoke_token(self, token_id: int) -> None:
        self._call("DELETE", f"/v1/tokens/{token_id}")

    def put_queue(self, body: QueueIn) -> Queue:
        payload = body.model_dump(mode="json")
        return Queue.model_validate(
            self._call("PUT", f"/v1/queues/{body.name}", json=payload).json()
        )

    def queues(self) -> list[Queue]:
        return self._list("/v1/queues", Queue)

    def queue(self, name: str) -> Queue:
        return self._get(f"/v1/queues/{name}", Queue)
