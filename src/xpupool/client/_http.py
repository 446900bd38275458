"""The typed client of the control plane: one method per endpoint, over ``_wire.Wire``.

Jobs and the fleet's reads (nodes, devices, sites, queues) come back as ``_views`` records, so
the CLI's most common commands import neither pydantic nor the server's wire types; every other
answer is parsed with the server's own wire types (``server/schemas/``, read leniently), imported
by the method that needs them. Failures are ``ApiError``, ``Unreachable`` or ``BadAnswer``.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from xpupool.client._config import ClientConfig
from xpupool.client._errors import BadAnswer
from xpupool.client._views import DeviceView, JobView, NodeView, QueueView, SiteView, read_list
from xpupool.client._wire import Send, Wire

if TYPE_CHECKING:
    from pydantic import BaseModel

    from xpupool.server.schemas.audit import AuditEntry
    from xpupool.server.schemas.card_layouts import CardLayoutIn, CardLayoutView
    from xpupool.server.schemas.devices import Accelerator
    from xpupool.server.schemas.jobs import JobIn
    from xpupool.server.schemas.models import CatalogModel, ModelIntent, PlanRow
    from xpupool.server.schemas.nodes import NodeDeletion, NodeTaintsIn
    from xpupool.server.schemas.queues import QueueIn
    from xpupool.server.schemas.services import Service, ServiceIn
    from xpupool.server.schemas.tenants import Tenant, TenantIn, TenantPatch, Token, TokenIn
    from xpupool.server.schemas.throughput import MeasuredSpeed

    M = TypeVar("M", bound=BaseModel)


class Client:
    """A session with one server. ``send`` lets tests answer without a network (``_wire.Send``)."""

    def __init__(
        self, config: ClientConfig, *, timeout_s: float = 30.0, send: Send | None = None
    ) -> None:
        self.config = config
        self._wire = Wire(config, timeout_s=timeout_s, send=send)

    def close(self) -> None:
        """Nothing held between requests (``Wire`` opens a connection per request)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------- plumbing
    def _json(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        return self._wire.json(method, path, params=params, json_body=body)

    def _model(self, model: type[M], method: str, path: str, body: Any = None, **params: Any) -> M:
        return model.model_validate(self._json(method, path, body, **params))

    def _models(self, model: type[M], path: str, **params: Any) -> list[M]:
        from pydantic import TypeAdapter

        return TypeAdapter(list[model]).validate_python(  # type: ignore[valid-type]
            self._json("GET", path, **params)
        )

    @staticmethod
    def _dump(body: BaseModel) -> Any:
        return body.model_dump(mode="json", exclude_unset=True)

    # ---------------------------------------------------------------------------- jobs
    def submit(self, job: JobIn) -> JobView:
        return JobView.read(self._json("POST", "/v1/jobs", self._dump(job)))

    def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[JobView]:
        found = self._json("GET", "/v1/jobs", state=state, queue=queue, tenant=tenant, limit=limit)
        return read_list(found, JobView.read, "jobs")

    def job(self, job_id: int) -> JobView:
        return JobView.read(self._json("GET", f"/v1/jobs/{job_id}"))

    def cancel(self, job_id: int) -> JobView:
        return JobView.read(self._json("POST", f"/v1/jobs/{job_id}/cancel"))

    def logs(self, job_id: int, *, replica: int = 0, offset: int = 0) -> tuple[int, bytes]:
        """Raw log bytes of one replica from byte ``offset``, and how many bytes before them
        the log no longer holds (rotated away: ``xpupool/log_rotation.py``); the next offset is
        ``offset`` plus both."""
        from xpupool.log_rotation import SKIPPED_HEADER

        params = {"replica": replica, "offset": offset}
        answer = self._wire.call("GET", f"/v1/jobs/{job_id}/logs", params=params)
        skipped = answer.headers.get(SKIPPED_HEADER.lower(), "0")
        if not skipped.isdigit():
            raise BadAnswer(SKIPPED_HEADER, skipped, "expected a count of bytes")
        return int(skipped), answer.body

    def service_replicas(self, name: str) -> list[dict[str, Any]]:
        """``replicas`` of ``GET /v1/services/NAME`` (``job_id``, ``state``, ``ready``, ...), as
        ``xpupool logs SERVICE`` follows them."""
        found = self._json("GET", f"/v1/services/{quote(name, safe='')}")
        replicas = found.get("replicas") if isinstance(found, dict) else None
        if not isinstance(replicas, list):
            raise BadAnswer("service.replicas", replicas, "expected a list")
        return [r for r in replicas if isinstance(r, dict)]

    # ---------------------------------------------------------------------------- fleet
    def nodes(self, *, site: str | None = None) -> list[NodeView]:
        return read_list(self._json("GET", "/v1/nodes", site=site), NodeView.read, "nodes")

    def node(self, name: str) -> NodeView:
        return NodeView.read(self._json("GET", f"/v1/nodes/{name}"))

    def cordon_node(self, name: str, cordon: bool = True) -> NodeView:
        verb = "cordon" if cordon else "uncordon"
        return NodeView.read(self._json("POST", f"/v1/nodes/{name}/{verb}"))

    def taint_node(self, name: str, change: NodeTaintsIn) -> NodeView:
        path = f"/v1/nodes/{quote(name, safe='')}/taints"
        return NodeView.read(self._json("POST", path, self._dump(change)))

    def recut_card(self, node: str, card: str, body: CardLayoutIn) -> CardLayoutView:
        from xpupool.server.schemas.card_layouts import CardLayoutView

        path = f"/v1/nodes/{quote(node, safe='')}/cards/{quote(card, safe='')}/layout"
        return self._model(CardLayoutView, "PUT", path, self._dump(body))

    def delete_node(self, name: str, *, drain: bool = False) -> NodeDeletion:
        from xpupool.server.schemas.nodes import NodeDeletion

        return self._model(NodeDeletion, "DELETE", f"/v1/nodes/{quote(name, safe='')}", drain=drain)

    def devices(self, *, node: str | None = None) -> list[DeviceView]:
        return read_list(self._json("GET", "/v1/devices", node=node), DeviceView.read, "devices")

    def cordon_device(self, uuid: str, cordon: bool = True) -> DeviceView:
        verb = "cordon" if cordon else "uncordon"
        return DeviceView.read(self._json("POST", f"/v1/devices/{quote(uuid, safe='')}/{verb}"))

    def sites(self) -> list[SiteView]:
        return read_list(self._json("GET", "/v1/sites"), SiteView.read, "sites")

    def drain_site(self, name: str, drain: bool = True) -> SiteView:
        verb = "drain" if drain else "undrain"
        return SiteView.read(self._json("POST", f"/v1/sites/{quote(name, safe='')}/{verb}"))

    def accelerators(self) -> list[Accelerator]:
        from xpupool.server.schemas.devices import Accelerator

        return self._models(Accelerator, "/v1/accelerators")

    def models(self) -> list[CatalogModel]:
        from xpupool.server.schemas.models import CatalogModel

        return self._models(CatalogModel, "/v1/models")

    def plan(self, body: ModelIntent) -> list[PlanRow]:
        from pydantic import TypeAdapter

        from xpupool.server.schemas.models import PlanRow

        return TypeAdapter(list[PlanRow]).validate_python(
            self._json("POST", "/v1/plan", self._dump(body))
        )

    def measured_speeds(self, *, kind: str | None = None) -> list[MeasuredSpeed]:
        """The caller's measured speeds (``GET /v1/throughput``; the admin: every tenant's)."""
        from xpupool.server.schemas.throughput import MeasuredSpeed

        return self._models(MeasuredSpeed, "/v1/throughput", kind=kind)

    # ---------------------------------------------------------------------------- tenants
    def create_tenant(self, body: TenantIn) -> Tenant:
        from xpupool.server.schemas.tenants import Tenant

        return self._model(Tenant, "POST", "/v1/tenants", self._dump(body))

    def tenants(self) -> list[Tenant]:
        from xpupool.server.schemas.tenants import Tenant

        return self._models(Tenant, "/v1/tenants")

    def update_tenant(self, name: str, patch: TenantPatch) -> Tenant:
        from xpupool.server.schemas.tenants import Tenant

        return self._model(Tenant, "PATCH", f"/v1/tenants/{quote(name)}", self._dump(patch))

    def issue_token(self, tenant: str, body: TokenIn) -> Token:
        from xpupool.server.schemas.tenants import Token

        return self._model(Token, "POST", f"/v1/tenants/{tenant}/tokens", self._dump(body))

    def issue_agent_token(self, body: TokenIn) -> Token:
        from xpupool.server.schemas.tenants import Token

        return self._model(Token, "POST", "/v1/tokens", self._dump(body))

    def usage(
        self, *, by: str, start: float | None, end: float | None, step: str
    ) -> dict[str, Any]:
        """``GET /v1/usage`` as the server answers it (docs/usage.md)."""
        answer = self._json("GET", "/v1/usage", by=by, step=step, **{"from": start, "to": end})
        assert isinstance(answer, dict)
        return answer

    def prices(self, at: str | None = None) -> dict[str, Any]:
        """The price table in force at ``at`` (default now; ``GET /v1/prices``; docs/usage.md)."""
        answer = self._json("GET", "/v1/prices", at=at)
        assert isinstance(answer, dict)
        return answer

    def price_history(self) -> list[dict[str, Any]]:
        """Every price table by the time it takes effect (``GET /v1/prices/history``)."""
        answer = self._json("GET", "/v1/prices/history")
        assert isinstance(answer, dict)
        return list(answer["tables"])

    def set_prices(self, table: dict[str, Any], at: str | None = None) -> dict[str, Any]:
        """The price table from ``at`` on (default now; ``PUT /v1/prices``, the admin's)."""
        answer = self._json("PUT", "/v1/prices", table, at=at)
        assert isinstance(answer, dict)
        return answer

    def budget(self, tenant: str) -> dict[str, Any]:
        """``tenant``'s budget and its spend (``GET /v1/tenants/{tenant}/budget``)."""
        answer = self._json("GET", f"/v1/tenants/{quote(tenant, safe='')}/budget")
        assert isinstance(answer, dict)
        return answer

    def set_budget(self, tenant: str, budget: dict[str, Any]) -> dict[str, Any]:
        """Set ``tenant``'s budget (``PUT /v1/tenants/{tenant}/budget``, the admin's)."""
        answer = self._json("PUT", f"/v1/tenants/{quote(tenant, safe='')}/budget", budget)
        assert isinstance(answer, dict)
        return answer

    def delete_budget(self, tenant: str) -> None:
        """Remove ``tenant``'s budget (``DELETE /v1/tenants/{tenant}/budget``)."""
        self._wire.call("DELETE", f"/v1/tenants/{quote(tenant, safe='')}/budget")

    def usage_export(self, month: str) -> str:
        """The month's CSV (``GET /v1/usage/export``)."""
        return self._wire.call("GET", "/v1/usage/export", params={"month": month}).body.decode()

    def audit(
        self, *, since: float | None = None, limit: int | None = None, kind: str | None = None
    ) -> list[AuditEntry]:
        from xpupool.server.schemas.audit import AuditEntry

        return self._models(AuditEntry, "/v1/audit", since=since, limit=limit, kind=kind)

    def tokens(self) -> list[Token]:
        from xpupool.server.schemas.tenants import Token

        return self._models(Token, "/v1/tokens")

    def revoke_token(self, token_id: int) -> None:
        self._wire.call("DELETE", f"/v1/tokens/{token_id}")

    def set_secret(self, name: str, value: bytes, *, tenant: str | None = None) -> dict[str, Any]:
        """Store ``value`` as secret ``name``: as text when it is UTF-8 without NUL, else base64."""
        try:
            text = value.decode()
            body = {"secret": text} if "\0" not in text else None
        except UnicodeDecodeError:
            body = None
        if body is None:
            body = {"secret_base64": base64.b64encode(value).decode()}
        found: dict[str, Any] = self._json("PUT", f"/v1/secrets/{name}", body, tenant=tenant)
        return found

    def secrets(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._json("GET", "/v1/secrets", tenant=tenant)
        return found

    def delete_secret(self, name: str, *, tenant: str | None = None) -> None:
        params = {} if tenant is None else {"tenant": tenant}
        self._wire.call("DELETE", f"/v1/secrets/{name}", params=params)

    def rotate_secret_key(self) -> dict[str, Any]:
        found: dict[str, Any] = self._json("POST", "/v1/secrets/rotate-key")
        return found

    def issue_service_token(
        self, service: str, name: str | None = None, *, tenant: str | None = None
    ) -> dict[str, Any]:
        body = {} if name is None else {"name": name}
        path = f"/v1/services/{service}/tokens"
        found: dict[str, Any] = self._json("POST", path, body, tenant=tenant)
        return found

    def service_tokens(self, service: str, *, tenant: str | None = None) -> list[dict[str, Any]]:
        path = f"/v1/services/{service}/tokens"
        found: list[dict[str, Any]] = self._json("GET", path, tenant=tenant)
        return found

    def revoke_service_token(
        self, service: str, token_id: int, *, tenant: str | None = None
    ) -> None:
        params = {} if tenant is None else {"tenant": tenant}
        self._wire.call("DELETE", f"/v1/services/{service}/tokens/{token_id}", params=params)

    def put_volume(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = self._json("PUT", f"/v1/volumes/{name}", body)
        return found

    def volumes(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._json("GET", "/v1/volumes")
        return found

    def delete_volume(self, name: str) -> None:
        self._wire.call("DELETE", f"/v1/volumes/{name}")

    def create_reservation(self, body: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = self._json("POST", "/v1/reservations", body)
        return found

    def reservations(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._json("GET", "/v1/reservations")
        return found

    def delete_reservation(self, name: str) -> None:
        self._wire.call("DELETE", f"/v1/reservations/{name}")

    def defrag_plan(self) -> dict[str, Any]:
        found: dict[str, Any] = self._json("GET", "/v1/defrag/plan")
        return found

    def put_queue(self, body: QueueIn) -> QueueView:
        payload = body.model_dump(mode="json")
        return QueueView.read(self._json("PUT", f"/v1/queues/{body.name}", payload))

    def queues(self) -> list[QueueView]:
        return read_list(self._json("GET", "/v1/queues"), QueueView.read, "queues")

    def queue(self, name: str) -> QueueView:
        return QueueView.read(self._json("GET", f"/v1/queues/{name}"))

    # ---------------------------------------------------------------------------- services
    def create_service(self, body: ServiceIn) -> Service:
        from xpupool.server.schemas.services import Service

        return self._model(Service, "POST", "/v1/services", self._dump(body))

    def services(self, tenant: str | None = None) -> list[Service]:
        from xpupool.server.schemas.services import Service

        return self._models(Service, "/v1/services", **({"tenant": tenant} if tenant else {}))

    def service(self, name: str, tenant: str | None = None) -> Service:
        from xpupool.server.schemas.services import Service

        params = {"tenant": tenant} if tenant else {}
        return self._model(Service, "GET", f"/v1/services/{quote(name, safe='')}", **params)

    def stop_service(self, name: str, tenant: str | None = None) -> Service:
        from xpupool.server.schemas.services import Service

        params = {"tenant": tenant} if tenant else {}
        return self._model(Service, "POST", f"/v1/services/{quote(name, safe='')}/stop", **params)

    def start_service(self, name: str, tenant: str | None = None) -> Service:
        from xpupool.server.schemas.services import Service

        params = {"tenant": tenant} if tenant else {}
        path = f"/v1/services/{quote(name, safe='')}/start"
        return self._model(Service, "POST", path, **params)

    def delete_service(self, name: str, tenant: str | None = None) -> None:
        params = {"tenant": tenant} if tenant else {}
        self._wire.call("DELETE", f"/v1/services/{quote(name, safe='')}", params=params)
