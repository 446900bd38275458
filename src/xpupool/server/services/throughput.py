"""``GET /v1/throughput``: the stored measured figures (``storage/throughput.py``), read from the
store, where each report writes its figure, so that the read takes no plane lock. Job types are
per tenant (``server/throughput_knowledge.py``): a tenant reads its own figures only, the admin
any tenant's."""

from __future__ import annotations

from sqlalchemy import select

from xpupool.model.errors import RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.throughput import MeasuredSpeed
from xpupool.server.storage.throughput import throughput_measured as t_measured


def measured(
    plane: ControlPlane, who: Principal, *, kind: str | None = None, tenant: str | None = None
) -> list[MeasuredSpeed]:
    """The figures of ``kind`` (every kind when None) of ``tenant`` (a tenant token: its own,
    naming another is a :class:`RequestError` on ``tenant``; the admin: every tenant's when
    None), sorted by tenant, kind and fastest first."""
    if not who.is_admin:
        if tenant is not None and tenant != who.tenant:
            raise RequestError("tenant", tenant, "a tenant token reads only its own figures")
        tenant = who.tenant or ""
    query = select(t_measured)
    if tenant is not None:
        query = query.where(t_measured.c.tenant == tenant)
    if kind is not None:
        query = query.where(t_measured.c.kind == kind)
    with plane.db.connect() as conn:
        rows = conn.execute(query).mappings().all()
    out = [MeasuredSpeed.model_validate(dict(row)) for row in rows]
    return sorted(out, key=lambda m: (m.tenant, m.kind, -m.rate, m.model))
