"""The typed HTTP client of the control plane: one method per endpoint, answers parsed with the
server's own wire types (``server/schemas.py``, read leniently), failures mapped to ``ApiError`` or
``Unreachable`` as httpx maps transport errors (``httpx/_exceptions.py``)."""

from __future__ import annotations

import ssl
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from xpupool.client._config import ClientConfig
from xpupool.client._errors import ApiError, Unreachable
from xpupool.server import schemas as s

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
            body = s.ErrorBody.model_validate(response.json())
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
    def submit(self, job: s.JobIn) -> s.Job:
        return self._post("/v1/jobs", s.Job, job)

    def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[s.Job]:
        return self._list("/v1/jobs", s.Job, state=state, queue=queue, tenant=tenant, limit=limit)

    def job(self, job_id: int) -> s.Job:
        return self._get(f"/v1/jobs/{job_id}", s.Job)

    def cancel(self, job_id: int) -> s.Job:
        return self._post(f"/v1/jobs/{job_id}/cancel", s.Job)

    def logs(self, job_id: int, *, replica: int = 0, offset: int = 0) -> bytes:
        """Raw log bytes of one replica from byte ``offset``; the next offset is ``offset + len``."""
        params = {"replica": replica, "offset": offset}
        return self._call("GET", f"/v1/jobs/{job_id}/logs", params=params).content

    # ---------------------------------------------------------------------------- fleet
    def nodes(self, *, site: str | None = None) -> list[s.Node]:
        return self._list("/v1/nodes", s.Node, site=site)

    def node(self, name: str) -> s.Node:
        return self._get(f"/v1/nodes/{name}", s.Node)

    def cordon_node(self, name: str, cordon: bool = True) -> s.Node:
        return self._post(f"/v1/nodes/{name}/{'cordon' if cordon else 'uncordon'}", s.Node)

    def taint_node(self, name: str, change: s.NodeTaintsIn) -> s.Node:
        return self._post(f"/v1/nodes/{quote(name, safe='')}/taints", s.Node, change)

    def delete_node(self, name: str, *, drain: bool = False) -> s.NodeDeletion:
        response = self._call(
            "DELETE", f"/v1/nodes/{quote(name, safe='')}", params={"drain": str(drain).lower()}
        )
        return s.NodeDeletion.model_validate(response.json())

    def devices(self, *, node: str | None = None) -> list[s.Device]:
        return self._list("/v1/devices", s.Device, node=node)

    def cordon_device(self, uuid: str, cordon: bool = True) -> s.Device:
        return self._post(
            f"/v1/devices/{quote(uuid, safe='')}/{'cordon' if cordon else 'uncordon'}", s.Device
        )

    def sites(self) -> list[s.Site]:
        return self._list("/v1/sites", s.Site)

    def accelerators(self) -> list[s.Accelerator]:
        return self._list("/v1/accelerators", s.Accelerator)

    def models(self) -> list[s.CatalogModel]:
        return self._list("/v1/models", s.CatalogModel)

    def plan(self, body: s.ModelIntent) -> list[s.PlanRow]:
        payload = body.model_dump(mode="json", exclude_unset=True)
        return TypeAdapter(list[s.PlanRow]).validate_python(
            self._call("POST", "/v1/plan", json=payload).json()
        )

    # ---------------------------------------------------------------------------- tenants
    def create_tenant(self, body: s.TenantIn) -> s.Tenant:
        return self._post("/v1/tenants", s.Tenant, body)

    def tenants(self) -> list[s.Tenant]:
        return self._list("/v1/tenants", s.Tenant)

    def update_tenant(self, name: str, patch: s.TenantPatch) -> s.Tenant:
        payload = patch.model_dump(mode="json", exclude_unset=True)
        return s.Tenant.model_validate(
            self._call("PATCH", f"/v1/tenants/{quote(name)}", json=payload).json()
        )

    def issue_token(self, tenant: str, body: s.TokenIn) -> s.Token:
        return self._post(f"/v1/tenants/{tenant}/tokens", s.Token, body)

    def issue_agent_token(self, body: s.TokenIn) -> s.Token:
        return self._post("/v1/tokens", s.Token, body)

    def audit(
        self, *, since: float | None = None, limit: int | None = None, kind: str | None = None
    ) -> list[s.AuditEntry]:
        return self._list("/v1/audit", s.AuditEntry, since=since, limit=limit, kind=kind)

    def tokens(self) -> list[s.Token]:
        return self._list("/v1/tokens", s.Token)

    def revoke_token(self, token_id: int) -> None:
        self._call("DELETE", f"/v1/tokens/{token_id}")

    def put_queue(self, body: s.QueueIn) -> s.Queue:
        payload = body.model_dump(mode="json")
        return s.Queue.model_validate(
            self._call("PUT", f"/v1/queues/{body.name}", json=payload).json()
        )

    def queues(self) -> list[s.Queue]:
        return self._list("/v1/queues", s.Queue)

    def queue(self, name: str) -> s.Queue:
        return self._get(f"/v1/queues/{name}", s.Queue)
